// The live page (src/server/page/index.html), embedded into the binary at build time.
#pragma once

#include <string_view>

namespace molt::server {

std::string_view index_html();

}  // namespace molt::server
