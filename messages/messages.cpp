// Registration of the ferry type-ID block and error category.
#include "messages/messages.hpp"
#include "messages/trace_record.hpp"

#include <caf/actor_system_config.hpp>
#include <caf/message.hpp>

namespace ferry {

std::string to_string(errc x) {
  switch (x) {
    case errc::none: return "none";
    case errc::io_error: return "io_error";
    case errc::short_read: return "short_read";
    case errc::file_missing: return "file_missing";
    case errc::no_replica: return "no_replica";
    case errc::reader_down: return "reader_down";
    case errc::bad_request: return "bad_request";
    case errc::restart_budget: return "restart_budget";
    case errc::timeout: return "timeout";
    case errc::drafter_unavailable: return "drafter_unavailable";
    case errc::drafter_failed: return "drafter_failed";
    case errc::actor_down: return "actor_down";
  }
  return "errc(" + std::to_string(static_cast<int>(x)) + ")";
}

std::string io_error_file(const caf::error& e) {
  if (e.category() != caf::atom("ferry") || e.context().empty()) return {};
  if (!e.context().match_element<std::string>(0)) return {};
  return e.context().get_as<std::string>(0);
}

void register_ferry_types(caf::actor_system_config& cfg) {
  cfg.add_message_types<caf::id_block::ferry>();
  cfg.add_error_category(caf::atom("ferry"), [](uint8_t code, caf::atom_value, const caf::message& ctx) {
    std::string s = "ferry: ";
    s += to_string(static_cast<errc>(code));
    if (!ctx.empty()) {  // appended piecewise: GCC 12 warns (-Wrestrict, falsely) on " " + string
      s += ' ';
      s += caf::to_string(ctx);
    }
    return s;
  });
}

}  // namespace ferry
