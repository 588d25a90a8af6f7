// Blocks of a hand-written page that a generator owns (README figures computed from committed
// files). A block is the lines between two marker lines, HTML comments that Markdown hides:
//
//   <!-- generated: NAME (anything up to the end of the line: who writes it) -->
//   ...body...
//   <!-- end generated: NAME -->
//
// The rest of the page stays hand-written; a test regenerates the bodies and compares.
#pragma once

#include <map>
#include <string>
#include <string_view>

namespace molt {

// The body of every block in `text`, by name. Throws naming `source` and the block when a block
// is unclosed, nested or named twice.
std::map<std::string, std::string> generated_blocks(std::string_view text,
                                                    const std::string& source);

// `text` with the body of every block replaced by bodies.at(NAME) (each ends with a newline).
// Throws naming `source` when `text` has no block or a block that `bodies` does not know.
std::string fill_generated_blocks(std::string_view text,
                                  const std::map<std::string, std::string>& bodies,
                                  const std::string& source);

}  // namespace molt
