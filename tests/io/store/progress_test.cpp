#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <thread>

#include "io/progress.hpp"

namespace ferry {
namespace {

std::string read_all(std::FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string s;
  char buf[512];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) s.append(buf, n);
  return s;
}

TEST(Progress, LineShowsFilesBytesRateAndEta) {
  std::FILE* f = std::tmpfile();
  Progress p("prepare", 10, 10'000'000, {true, 0, 5.0, f});
  p.add(4, 4'000'000);
  const auto l = p.line();
  EXPECT_NE(l.find("4/10 files"), std::string::npos) << l;
  EXPECT_NE(l.find("4.00 MB/10.0 MB"), std::string::npos) << l;
  EXPECT_NE(l.find("ETA"), std::string::npos) << l;
  EXPECT_NE(l.find(" 40%"), std::string::npos) << l;
  std::fclose(f);
}

TEST(Progress, NotATerminalAndShortJobPrintsNothing) {
  std::FILE* f = std::tmpfile();
  {
    Progress p("verify", 3, 300, {true, 0, 5.0, f});
    p.add(3, 300);
  }
  EXPECT_EQ(read_all(f), "");
  std::fclose(f);
}

TEST(Progress, NotATerminalPrintsPlainLinesAtTheInterval) {
  std::FILE* f = std::tmpfile();
  {
    Progress p("synth", 3, 300, {true, 0, 0.05, f});
    p.add(1, 100);
    std::this_thread::sleep_for(std::chrono::milliseconds(80));
    p.add(1, 100);
  }
  const auto out = read_all(f);
  EXPECT_EQ(out.find('\r'), std::string::npos) << "no carriage returns in logs";
  EXPECT_NE(out.find("2/3 files"), std::string::npos) << out;
  std::fclose(f);
}

TEST(Progress, TerminalRedrawsInPlace) {
  std::FILE* f = std::tmpfile();
  {
    Progress p("copy", 2, 200, {true, 1, 5.0, f});
    std::this_thread::sleep_for(std::chrono::milliseconds(120));
    p.add(2, 200);
  }
  const auto out = read_all(f);
  EXPECT_NE(out.find("\r\033[K"), std::string::npos);
  EXPECT_EQ(out.back(), '\n');
  std::fclose(f);
}

}  // namespace
}  // namespace ferry
