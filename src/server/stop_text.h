// Stop sequences over a streamed answer: text is released as soon as it can no longer be the
// start of a stop sequence, and nothing from the first match on is ever released.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace molt::server {

class StopText {
 public:
  explicit StopText(std::vector<std::string> stops) : stops_(std::move(stops)) {}
  // Adds a token's text; returns what may be sent now.
  std::string feed(std::string_view text);
  // The answer ended: what is still held back (nothing once stopped).
  std::string flush();
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool stopped_ = false;
};

}  // namespace molt::server
