// Reading a JSON file with errors that name the file and the parse position.
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "molt/common/error.h"
#include "molt/formats/hf_config.h"

namespace molt {

nlohmann::json parse_json_text(std::string_view text, const std::string& source) {
  auto depth_limit = [&](int depth, nlohmann::json::parse_event_t ev, nlohmann::json&) {
    if (depth >= kMaxJsonDepth && (ev == nlohmann::json::parse_event_t::object_start ||
                                   ev == nlohmann::json::parse_event_t::array_start)) {
      fail("{}: JSON nests deeper than {} levels", source, kMaxJsonDepth);
    }
    return true;
  };
  try {
    return nlohmann::json::parse(text.begin(), text.end(), depth_limit);
  } catch (const nlohmann::json::parse_error& e) {
    // e.what() carries line and column; e.byte is the offset a hex dump would show.
    fail("{}: malformed JSON at byte {}: {}", source, e.byte, e.what());
  } catch (const nlohmann::json::exception& e) {  // e.g. out_of_range: a number like 1e400
    fail("{}: malformed JSON: {}", source, e.what());
  }
}

nlohmann::json read_json_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open JSON file", path.string());
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) fail("{}: cannot read JSON file", path.string());
  return parse_json_text(ss.str(), path.string());
}

}  // namespace molt
