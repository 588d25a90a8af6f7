// molt::Error — the one exception type molt throws for bad input or bad state.
// Messages name the file and the field (e.g. "model.safetensors: tensor 'x': ...")
// so a user can act on them; front ends turn it into a non-zero exit or an HTTP 4xx.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>
#include <utility>

namespace molt {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace molt
