#include "molt/bench/needles.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <span>
#include <sstream>

#include "molt/common/error.h"
#include "molt/tokenizer/tokenizer.h"

namespace molt {
namespace {

// splitmix64: tiny, well mixed, identical everywhere.
class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed * 0x9E3779B97F4A7C15ull + 1) {}
  uint64_t next() {
    uint64_t z = (s_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  int64_t below(int64_t n) { return static_cast<int64_t>(next() % static_cast<uint64_t>(n)); }
  double unit() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  template <typename T>
  const T& pick(std::span<const T> v) {
    return v[static_cast<size_t>(below(static_cast<int64_t>(v.size())))];
  }

 private:
  uint64_t s_;
};

using Words = std::span<const std::string_view>;

constexpr std::array<std::string_view, 50> kNames = {
    "Alice",   "Bruno",  "Clara",  "Dmitri", "Elena",   "Farid",  "Greta",  "Hugo",    "Ines",
    "Jonas",   "Keiko",  "Liam",   "Maya",   "Nadia",   "Oscar",  "Priya",  "Quentin", "Rosa",
    "Samir",   "Tara",   "Ulrich", "Vera",   "Wendell", "Xenia",  "Yusuf",  "Zoe",     "Arthur",
    "Beatrix", "Carlos", "Daphne", "Emil",   "Fiona",   "Gustav", "Helena", "Ivan",    "Julia",
    "Kofi",    "Lena",   "Marco",  "Nora",   "Pablo",   "Rita",   "Stefan", "Tomas",   "Ursula",
    "Viktor",  "Willa",  "Anton",  "Sofia",  "Emma"};
constexpr std::array<std::string_view, 20> kPlaces = {
    "north gate",  "south tower",  "east wing",   "west door",    "main vault",
    "old library", "server room",  "back office", "river dock",   "garden shed",
    "front desk",  "lower garage", "upper lab",   "city archive", "clock tower",
    "boat house",  "fire station", "museum hall", "ward seven",   "supply depot"};
constexpr std::array<std::string_view, 20> kObjects = {
    "red notebook",   "spare key",     "brass lamp",     "blue folder",
    "old camera",     "first aid kit", "silver coin",    "map of the coast",
    "violin case",    "wooden chest",  "green umbrella", "laptop charger",
    "tool box",       "glass jar",     "chess set",      "paper lantern",
    "black suitcase", "radio",         "telescope",      "yellow helmet"};
constexpr std::array<std::string_view, 24> kCities = {
    "Lisbon", "Oslo",  "Kyoto",  "Denver", "Nairobi", "Lima",    "Dublin", "Quebec",
    "Hanoi",  "Porto", "Vienna", "Bergen", "Tunis",   "Cairo",   "Austin", "Perth",
    "Turin",  "Riga",  "Zagreb", "Malmo",  "Leeds",   "Seville", "Krakow", "Bogota"};
constexpr std::array<std::string_view, 14> kColours = {
    "red",   "blue",   "green",  "yellow", "purple", "orange", "black",
    "white", "silver", "golden", "brown",  "pink",   "grey",   "teal"};
constexpr std::array<std::string_view, 16> kJobs = {
    "baker",   "pilot",     "nurse",   "carpenter", "teacher", "chemist", "lawyer",   "farmer",
    "plumber", "librarian", "painter", "surgeon",   "sailor",  "tailor",  "jeweller", "architect"};
constexpr std::array<std::string_view, 16> kPets = {
    "Biscuit", "Pepper", "Shadow", "Mango",  "Pixel",  "Waffle", "Comet",  "Juniper",
    "Noodle",  "Ziggy",  "Clover", "Bandit", "Marble", "Pickle", "Rocket", "Sable"};
constexpr std::array<std::string_view, 8> kSystems = {
    "mail server",  "billing system", "wifi network",  "staff portal",
    "backup drive", "alarm panel",    "build machine", "guest account"};
constexpr std::array<std::string_view, 9> kDevices = {"printer",   "router",    "scanner",
                                                      "projector", "generator", "freezer",
                                                      "pump",      "drone",     "microscope"};
constexpr std::array<std::string_view, 40> kPasswords = {
    "apple",   "river",  "stone",   "cloud",   "maple",  "ember",  "falcon", "harbor",
    "meadow",  "copper", "lantern", "orbit",   "pebble", "quartz", "raven",  "saffron",
    "thistle", "velvet", "willow",  "zephyr",  "cobalt", "dune",   "fern",   "glacier",
    "hazel",   "iris",   "juniper", "kestrel", "lotus",  "marble", "nectar", "onyx",
    "prism",   "quill",  "rustic",  "sparrow", "tundra", "umber",  "vortex", "walnut"};

enum class Key { kPlace, kObject, kName, kSystem, kDevice, kCity };
enum class Ans { kNum, kSmall, kSerial, kColour, kCity, kWord, kPet, kJob };

struct Relation {
  Key key;
  std::string_view statement, question;  // "{k}" and "{a}" are filled in
  Ans answer;
};

constexpr std::array<Relation, 12> kRelations = {{
    {Key::kPlace, "The access code for the {k} is {a}.", "What is the access code for the {k}?",
     Ans::kNum},
    {Key::kObject, "The {k} is kept in locker {a}.", "In which locker is the {k} kept?", Ans::kNum},
    {Key::kName, "{k}'s favourite colour is {a}.", "What is {k}'s favourite colour?", Ans::kColour},
    {Key::kName, "{k} lives in {a}.", "Where does {k} live?", Ans::kCity},
    {Key::kSystem, "The password for the {k} is {a}.", "What is the password for the {k}?",
     Ans::kWord},
    {Key::kName, "The meeting with {k} is in room {a}.", "In which room is the meeting with {k}?",
     Ans::kNum},
    {Key::kName, "{k} has a pet called {a}.", "What is the name of {k}'s pet?", Ans::kPet},
    {Key::kDevice, "The serial number of the {k} is {a}.", "What is the serial number of the {k}?",
     Ans::kSerial},
    {Key::kCity, "The train to {k} leaves from platform {a}.",
     "Which platform does the train to {k} leave from?", Ans::kSmall},
    {Key::kName, "{k} works as a {a}.", "What does {k} work as?", Ans::kJob},
    {Key::kName, "The secret number of {k} is {a}.", "What is the secret number of {k}?",
     Ans::kNum},
    {Key::kPlace, "The {k} opens at {a} o'clock.", "At what time does the {k} open?", Ans::kSmall},
}};

Words keys(Key k) {
  switch (k) {
    case Key::kPlace:
      return kPlaces;
    case Key::kObject:
      return kObjects;
    case Key::kName:
      return kNames;
    case Key::kSystem:
      return kSystems;
    case Key::kDevice:
      return kDevices;
    case Key::kCity:
      return kCities;
  }
  return kNames;
}

std::string digits(Rng& rng, int lo, int hi) {
  std::string s;
  const int64_t n = lo + rng.below(hi - lo + 1);
  for (int64_t i = 0; i < n; ++i) s += static_cast<char>('0' + rng.below(10));
  return s;
}

std::string make_answer(Rng& rng, Ans kind) {
  switch (kind) {
    case Ans::kNum:
      return digits(rng, 3, 6);
    case Ans::kSmall:
      return std::to_string(1 + rng.below(12));
    case Ans::kSerial: {
      std::string s;
      s += static_cast<char>('A' + rng.below(26));
      s += static_cast<char>('A' + rng.below(26));
      return s + "-" + digits(rng, 3, 5);
    }
    case Ans::kColour:
      return std::string(rng.pick<std::string_view>(kColours));
    case Ans::kCity:
      return std::string(rng.pick<std::string_view>(kCities));
    case Ans::kWord:
      return std::string(rng.pick<std::string_view>(kPasswords));
    case Ans::kPet:
      return std::string(rng.pick<std::string_view>(kPets));
    case Ans::kJob:
      return std::string(rng.pick<std::string_view>(kJobs));
  }
  return {};
}

std::string fill_template(std::string_view tmpl, std::string_view k, std::string_view a) {
  std::string out;
  for (size_t i = 0; i < tmpl.size(); ++i) {
    if (tmpl.compare(i, 3, "{k}") == 0) {
      out += k;
      i += 2;
    } else if (tmpl.compare(i, 3, "{a}") == 0) {
      out += a;
      i += 2;
    } else {
      out += tmpl[i];
    }
  }
  return out;
}

std::vector<std::string_view> paragraphs(std::string_view text) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < text.size()) {
    size_t j = text.find("\n\n", i);
    if (j == std::string_view::npos) j = text.size();
    std::string_view p = text.substr(i, j - i);
    while (!p.empty() && (p.front() == '\n' || p.front() == ' ')) p.remove_prefix(1);
    while (!p.empty() && (p.back() == '\n' || p.back() == ' ')) p.remove_suffix(1);
    if (!p.empty()) out.push_back(p);
    i = j + 2;
  }
  return out;
}

std::string trim(std::string_view s) {
  const auto ws = [](char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; };
  while (!s.empty() && ws(s.front())) s.remove_prefix(1);
  while (!s.empty() && ws(s.back())) s.remove_suffix(1);
  return std::string(s);
}

}  // namespace

std::vector<NeedleItem> make_needles(const Tokenizer& tok, std::string_view filler,
                                     const NeedleOptions& opt) {
  if (opt.context < 64) fail("needles: context {} is too short (at least 64 tokens)", opt.context);
  if (opt.count <= 0) fail("needles: count must be positive, got {}", opt.count);
  const std::vector<std::string_view> paras = paragraphs(filler);
  const int64_t body_tokens = opt.context - 30;
  const size_t budget = static_cast<size_t>(static_cast<double>(body_tokens) * 4.2);
  if (paras.size() < 4 || filler.size() < budget) {
    fail(
        "needles: the filler text has {} bytes in {} paragraphs; a {}-token context needs at "
        "least {} bytes",
        filler.size(), paras.size(), opt.context, budget);
  }
  Rng rng(opt.seed);
  std::vector<NeedleItem> out;
  for (int64_t n = 0; n < opt.count; ++n) {
    const Relation& rel = kRelations[static_cast<size_t>(rng.below(kRelations.size()))];
    const std::string_view key = rng.pick<std::string_view>(keys(rel.key));
    const std::string ans = make_answer(rng, rel.answer);
    const std::string statement = fill_template(rel.statement, key, ans);
    const std::string question = fill_template(rel.question, key, ans);

    // Consecutive paragraphs from a random start, cut to the token budget.
    std::string text;
    for (size_t i = static_cast<size_t>(rng.below(static_cast<int64_t>(paras.size())));
         text.size() < budget; i = (i + 1) % paras.size()) {
      if (!text.empty()) text += "\n\n";
      text += paras[i];
    }
    std::vector<int32_t> ids = tok.encode(text, /*parse_special=*/false);
    if (static_cast<int64_t>(ids.size()) > body_tokens)
      ids.resize(static_cast<size_t>(body_tokens));
    text = tok.decode(ids);

    // Plant the fact at the paragraph boundary nearest a uniform depth.
    std::vector<size_t> cuts = {0};
    for (size_t i = text.find("\n\n"); i != std::string::npos; i = text.find("\n\n", i + 1)) {
      cuts.push_back(i + 2);
    }
    const double want = rng.unit() * static_cast<double>(text.size());
    const size_t cut = *std::min_element(cuts.begin(), cuts.end(), [&](size_t a, size_t b) {
      return std::abs(static_cast<double>(a) - want) < std::abs(static_cast<double>(b) - want);
    });
    const std::string body = text.substr(0, cut) + statement + "\n\n" + text.substr(cut);

    NeedleItem item;
    item.chat = opt.chat_every > 0 && n % opt.chat_every == opt.chat_every - 1;
    if (item.chat) {
      item.prompt = "<|im_start|>user\n";
      item.prompt += body;
      item.prompt += "\n\n";
      item.prompt += question;
      item.prompt += "<|im_end|>\n<|im_start|>assistant\n";
      item.answer = ans;
    } else {
      item.prompt = body;
      item.prompt += "\n\nQuestion: ";
      item.prompt += question;
      item.prompt += "\nAnswer:";
      item.answer = " " + ans;
    }
    item.depth = static_cast<double>(cut) / static_cast<double>(std::max<size_t>(1, text.size()));
    out.push_back(std::move(item));
  }
  return out;
}

bool needle_answer_matches(std::string_view got, std::string_view expected) {
  return trim(got) == trim(expected);
}

std::vector<NeedleItem> read_needles(const std::filesystem::path& file, int64_t context,
                                     int64_t count) {
  std::ifstream f(file);
  if (!f) fail("{}: cannot open", file.string());
  std::vector<NeedleItem> out;
  std::string line;
  for (int64_t no = 1; std::getline(f, line) && static_cast<int64_t>(out.size()) < count; ++no) {
    if (line.empty()) continue;
    try {
      const auto j = nlohmann::json::parse(line);
      if (j.at("context").get<int64_t>() != context) continue;
      NeedleItem n;
      n.prompt = j.at("prompt").get<std::string>();
      n.answer = j.at("answer").get<std::string>();
      n.depth = j.value("depth", 0.0);
      out.push_back(std::move(n));
    } catch (const nlohmann::json::exception& e) {
      fail("{}:{}: {}", file.string(), no, e.what());
    }
  }
  if (out.empty()) fail("{}: no needles with \"context\": {}", file.string(), context);
  return out;
}

std::string read_text_file(const std::filesystem::path& file) {
  std::ifstream f(file, std::ios::binary);
  if (!f) fail("{}: cannot open", file.string());
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

}  // namespace molt
