// Suite files of `ferry bench`: parsing, the errors that name the field to fix, the interleaved order
// and the `ferry run` command line an arm becomes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "apps/ferry/bench/bench_suite.hpp"
#include "io/errors.hpp"

using namespace ferry;
using namespace ferry::bench;
using nlohmann::json;
using ::testing::HasSubstr;

namespace {

json arm(const std::string& tag, json extra = json::object()) {
  json a = {{"tag", tag}, {"model", "m"}, {"prompt", "hi"}, {"n", 8}};
  a.update(extra);
  return a;
}

std::string error_of(const json& suite) {
  try {
    parse_suite(suite, "s.json");
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST(BenchSuite, ParsesArmsDefaultsAndSubstitutions) {
  const json j = {{"repeats", 2},
                  {"models_dir", "/models"},
                  {"defaults", {{"model", "{models}/demo/hf"}, {"n", 16}}},
                  {"arms", {{{"tag", "a"}, {"prompt", "hi"}},
                            {{"tag", "b"}, {"group", "a"}, {"prompt", "hi"}, {"n", 4}, {"draft", {{"spec", "ngram"}}}}}}};
  const Suite s = parse_suite(j, "dir/s.json");
  ASSERT_EQ(s.arms.size(), 2u);
  EXPECT_EQ(s.arms[0].model, "/models/demo/hf");
  EXPECT_EQ(s.arms[0].n, 16);
  EXPECT_EQ(s.arms[1].n, 4);  // the arm's own value wins over defaults
  EXPECT_EQ(s.arms[0].group, "a");
  EXPECT_EQ(s.arms[1].series, "drafted");
  EXPECT_EQ(s.reference_of("a"), 0u);  // the group's first arm unless one is marked
}

TEST(BenchSuite, ErrorsNameTheField) {
  EXPECT_THAT(error_of({{"arms", {arm("a"), {{"tag", "b"}, {"model", "m"}, {"prompt", "x"}}}}}),
              HasSubstr("field 'arms[1].n': missing required field"));
  EXPECT_THAT(error_of({{"arms", {arm("a", {{"n", "eight"}})}}}), HasSubstr("field 'arms[0].n': expected an integer"));
  EXPECT_THAT(error_of({{"arms", {arm("a", {{"prompt_fle", "x"}})}}}), HasSubstr("field 'arms[0].prompt_fle': unknown field"));
  EXPECT_THAT(error_of({{"arms", {arm("a", {{"mode", "instruct"}})}}}), HasSubstr("field 'arms[0].mode'"));
  EXPECT_THAT(error_of({{"arms", {arm("a", {{"prompt_ids", {1, 2}}})}}}),
              HasSubstr("give exactly one of prompt, prompt_file, prompt_ids"));
  EXPECT_THAT(error_of({{"arms", {arm("a"), arm("a")}}}), HasSubstr("field 'arms[1].tag': duplicate tag 'a'"));
  EXPECT_THAT(error_of({{"arms", {arm("a", {{"cache", {{"expert", 4}}}})}}}), HasSubstr("field 'arms[0].cache.expert'"));
  EXPECT_THAT(error_of({{"arms", json::array()}}), HasSubstr("field 'arms'"));
  EXPECT_THAT(error_of({{"arms", {arm("a", {{"prompt", nullptr}, {"prompt_file", "/no/such/file"}})}}}),
              HasSubstr("field 'arms[0].prompt_file': no such file"));
  EXPECT_THAT(error_of({{"arms", {arm("a", {{"group", "g"}, {"reference", true}}), arm("b", {{"group", "g"}, {"reference", true}})}}}),
              HasSubstr("more than one reference"));
}

TEST(BenchSuite, ReplayOfTheReferenceNeedsTheReferenceListedFirst) {
  const json replay = {{"group", "g"}, {"draft", {{"spec", "replay:{reference},rate=0.5"}}}};
  EXPECT_THAT(error_of({{"arms", {arm("r", replay), arm("p", {{"group", "g"}})}}}), HasSubstr("field 'arms[0].draft.spec'"));
  EXPECT_EQ(error_of({{"arms", {arm("p", {{"group", "g"}}), arm("r", replay)}}}), "(no error)");
}

TEST(BenchSuite, InterleavesArmsRoundByRound) {
  json j = {{"repeats", 3}, {"arms", {arm("A"), arm("B", {{"repeats", 1}}), arm("C")}}};
  const Suite s = parse_suite(j, "s.json");
  std::string order;
  for (const Slot& sl : interleave(s)) order += s.arms[sl.arm].tag + std::to_string(sl.repeat + 1) + " ";
  EXPECT_EQ(order, "A1 B1 C1 A2 C2 A3 C3 ");
  EXPECT_EQ(interleave(s, 2).size(), 6u);  // --repeats overrides every arm's count
}

TEST(BenchSuite, ArmBecomesARunCommandLine) {
  json j = {{"arms",
             {arm("ref", {{"group", "g"}}),
              arm("a", {{"group", "g"},
                        {"mode", "chat"},
                        {"ctx", 512},
                        {"temp", 0.5},
                        {"seed", 7},
                        {"cache", {{"ssd_streaming", true}, {"experts", 16}, {"host_pool", "2GB"}}},
                        {"draft", {{"spec", "replay:{reference},rate=0.25"}, {"gate", 0.9}}},
                        {"args", {"--spine-type", "f32"}}})}}};
  const Suite s = parse_suite(j, "s.json");
  const auto v = run_args(s.arms[1], "h.txt", "ref.json");
  std::string line;
  for (const auto& x : v) line += x + " ";
  EXPECT_EQ(line,
            "run -m m -p hi -n 8 -c 512 --temp 0.5 --seed 7 --chat --ignore-eos --ssd-streaming --cache-experts 16 "
            "--host-pool 2GB --draft replay:ref.json,rate=0.25 --draft-gate 0.9 --spine-type f32 --trace-hash h.txt "
            "--json ");
}

// The drafter's cost gate is an arm setting like the others (`ferry run --draft-cost-gate`): an arm can
// measure ungated drafting beside gated.
TEST(BenchSuite, DraftCostGateReachesTheRunCommandLine) {
  json j = {{"arms", {arm("ref", {{"group", "g"}}),
                      arm("a", {{"group", "g"}, {"draft", {{"spec", "ngram"}, {"cost_gate", false}}}})}}};
  const auto v = run_args(parse_suite(j, "s.json").arms[1], "", "ref.json");
  std::string line;
  for (const auto& x : v) line += x + " ";
  EXPECT_NE(line.find("--draft ngram --draft-cost-gate off"), std::string::npos) << line;
}
