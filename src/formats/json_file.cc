// Reading a JSON file with errors that name the file and the parse position.
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "molt/common/error.h"
#include "molt/formats/hf_config.h"

namespace molt {

nlohmann::json read_json_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open JSON file", path.string());
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) fail("{}: cannot read JSON file", path.string());
  try {
    return nlohmann::json::parse(ss.str());
  } catch (const nlohmann::json::parse_error& e) {
    // e.what() carries line and column; e.byte is the offset a hex dump would show.
    fail("{}: malformed JSON at byte {}: {}", path.string(), e.byte, e.what());
  }
}

}  // namespace molt
