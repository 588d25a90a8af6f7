// molt tokenize / molt detokenize: text <-> token ids with a Hugging Face or tiktoken tokenizer.
#include <fmt/core.h>

#include <cstdio>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "command.h"
#include "molt/common/error.h"
#include "molt/tokenizer/chat_template.h"
#include "molt/tokenizer/tokenizer.h"

namespace molt::cli {
namespace {

struct TokenizeArgs {
  std::string tokenizer;
  std::string specials;
  std::string text;
  bool has_text = false;
  bool jsonl = false;
  bool byte_fallback = false;
  bool no_special = false;
  bool chat = false;
};

struct DetokenizeArgs {
  std::string tokenizer;
  std::string specials;
  std::string ids;
  bool has_ids = false;
  bool jsonl = false;
  bool skip_special = false;
  bool raw_bytes = false;
};

std::string read_stdin() {
  std::cin >> std::noskipws;
  return std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
}

void write(std::string_view s) {
  std::fwrite(s.data(), 1, s.size(), stdout);
}

std::string join_ids(const std::vector<int32_t>& ids) {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) out += ' ';
    out += std::to_string(ids[i]);
  }
  return out;
}

// Calls f(line, line_number) for each line of stdin; a final line without '\n' counts too.
template <typename F>
void for_each_stdin_line(F f) {
  std::string line;
  size_t n = 0;
  while (std::getline(std::cin, line)) {
    ++n;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    f(line, n);
  }
}

void run_tokenize(const TokenizeArgs& a) {
  auto tok = Tokenizer::load(a.tokenizer, a.specials);
  const InvalidUtf8 invalid = a.byte_fallback ? InvalidUtf8::kByteFallback : InvalidUtf8::kError;
  auto encode = [&](const std::string& text, const std::string& where) {
    try {
      const std::string input =
          a.chat ? apply_chat_template({{"user", text, {}}}, /*add_generation_prompt=*/true) : text;
      return tok->encode(input, !a.no_special, invalid);
    } catch (const Error& e) {
      fail("{}: {}", where, e.what());
    }
  };
  if (a.jsonl) {
    if (a.has_text) fail("--jsonl reads stdin; do not combine it with --text");
    for_each_stdin_line([&](const std::string& line, size_t n) {
      const std::string where = fmt::format("stdin line {}", n);
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(line);
      } catch (const nlohmann::json::parse_error& e) {
        fail("{}: not valid JSON: {}", where, e.what());
      }
      if (!j.is_string()) fail("{}: expected a JSON string", where);
      write(nlohmann::json(encode(j.get<std::string>(), where)).dump() + "\n");
    });
    return;
  }
  const std::string text = a.has_text ? a.text : read_stdin();
  write(join_ids(encode(text, a.has_text ? "--text" : "stdin")) + "\n");
}

void run_detokenize(const DetokenizeArgs& a) {
  auto tok = Tokenizer::load(a.tokenizer, a.specials);
  auto decode = [&](const std::vector<int32_t>& ids, const std::string& where) {
    try {
      return a.raw_bytes ? tok->decode_bytes(ids, a.skip_special)
                         : tok->decode(ids, a.skip_special);
    } catch (const Error& e) {
      fail("{}: {}", where, e.what());
    }
  };
  if (a.jsonl) {
    if (a.has_ids) fail("--jsonl reads stdin; do not combine it with --ids");
    if (a.raw_bytes) fail("--jsonl writes JSON strings, which cannot hold raw bytes");
    for_each_stdin_line([&](const std::string& line, size_t n) {
      const std::string where = fmt::format("stdin line {}", n);
      std::vector<int32_t> ids;
      try {
        const nlohmann::json j = nlohmann::json::parse(line);
        if (!j.is_array()) fail("{}: expected a JSON array of token ids", where);
        for (const auto& v : j) {
          if (!v.is_number_integer()) fail("{}: {} is not a token id", where, v.dump());
          ids.push_back(v.get<int32_t>());
        }
      } catch (const nlohmann::json::exception& e) {
        fail("{}: not valid JSON: {}", where, e.what());
      }
      write(nlohmann::json(decode(ids, where)).dump(-1, ' ', false) + "\n");
    });
    return;
  }
  const std::string where = a.has_ids ? "--ids" : "stdin";
  std::string text = a.has_ids ? a.ids : read_stdin();
  for (char& c : text) {
    if (c == '[' || c == ']' || c == '\r') c = ' ';  // accept a JSON array too
  }
  write(decode(parse_ids(text, where), where));
}

void add_tokenizer_options(CLI::App* s, std::string& tokenizer, std::string& specials) {
  s->add_option("--tokenizer", tokenizer,
                "model folder, tokenizer.json, vocab.json, merges.txt or *.tiktoken")
      ->required();
  s->add_option("--specials", specials,
                "JSON file of added tokens ({\"<|im_end|>\": 151645, ...}) for rank files");
}

const bool registered = register_command([](CLI::App& root) {
  {
    auto a = std::make_shared<TokenizeArgs>();
    CLI::App* s = root.add_subcommand(
        "tokenize", "Text to token ids (stdin unless --text); prints ids separated by spaces");
    add_tokenizer_options(s, a->tokenizer, a->specials);
    s->add_option("--text", a->text, "text to encode instead of stdin");
    s->add_flag("--jsonl", a->jsonl,
                "read one JSON string per stdin line, print one JSON array of ids per line");
    s->add_flag("--byte-fallback", a->byte_fallback,
                "encode bytes that are not valid UTF-8 as byte tokens instead of failing");
    s->add_flag("--no-special", a->no_special,
                "treat special tokens such as <|im_end|> in the text as plain text");
    s->add_flag("--chat", a->chat,
                "wrap the text as one user turn of the chat template, with the assistant prompt");
    s->callback([a, s] {
      a->has_text = s->count("--text") > 0;
      run_tokenize(*a);
    });
  }
  {
    auto a = std::make_shared<DetokenizeArgs>();
    CLI::App* s = root.add_subcommand(
        "detokenize", "Token ids (stdin unless --ids; spaces or commas) to text, written as is");
    add_tokenizer_options(s, a->tokenizer, a->specials);
    s->add_option("--ids", a->ids, "ids to decode instead of stdin, e.g. \"9707 1879\"");
    s->add_flag("--jsonl", a->jsonl,
                "read one JSON array of ids per stdin line, print one JSON string per line");
    s->add_flag("--skip-special", a->skip_special, "leave special tokens out of the text");
    s->add_flag("--raw-bytes", a->raw_bytes,
                "write the tokens' bytes even where they are not valid UTF-8 (default: U+FFFD)");
    s->callback([a, s] {
      a->has_ids = s->count("--ids") > 0;
      run_detokenize(*a);
    });
  }
});

}  // namespace
}  // namespace molt::cli
