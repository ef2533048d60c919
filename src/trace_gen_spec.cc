// The text forms of the generator's options (see kvsim/trace_gen.h for the grammar).
#include <algorithm>
#include <cctype>
#include <cmath>
#include <tuple>

#include "decimal.h"
#include "kvsim/error.h"
#include "kvsim/trace_gen.h"
#include "kvsim/units.h"
#include "random.h"
#include "trace_gen_internal.h"
#include "trace_read.h"

namespace kvsim {
namespace {

constexpr std::int64_t kBillion = 1'000'000'000;

[[noreturn]] void bad(std::string_view field, const std::string& problem) {
  throw InputError(Location{"", 0, std::string(field)}, problem);
}

struct Spec {
  std::string_view kind;
  std::string_view body;
  bool has_kind = false;
};

// "kind:body", or just "body" when there is no colon.
Spec split_kind(std::string_view text) {
  const auto colon = text.find(':');
  if (colon == std::string_view::npos) return {{}, text, false};
  return {text.substr(0, colon), text.substr(colon + 1), true};
}

struct KeyValue {
  std::string_view key;
  std::string_view value;
};

// Splits "a=1,b=lognormal:mean=5s,p99=60s" into key=value pairs. A comma separates two
// pairs when what follows it is a name and '=', except the names a nested distribution uses
// (mean, p99, min, max) when they are not ours: so a value may hold a lognormal with its
// own commas, and a misspelt key ("shared=") is still caught as unknown.
std::vector<KeyValue> key_values(std::string_view body, std::initializer_list<std::string_view> keys,
                                 std::string_view field, std::string_view what) {
  const auto ours = [&](std::string_view name) {
    for (auto k : keys) {
      if (k == name) return true;
    }
    return false;
  };
  const auto starts_key = [&](std::string_view rest) {
    std::size_t i = 0;
    while (i < rest.size() && (std::isalpha(static_cast<unsigned char>(rest[i])) || rest[i] == '_' ||
                               (i > 0 && std::isdigit(static_cast<unsigned char>(rest[i]))))) {
      ++i;
    }
    if (i == 0 || i == rest.size() || rest[i] != '=') return false;
    const std::string_view name = rest.substr(0, i);
    const bool nested = name == "mean" || name == "p99" || name == "min" || name == "max";
    return !nested || ours(name);
  };
  std::vector<std::string_view> pieces;
  std::size_t start = 0;
  for (std::size_t i = 0; i < body.size(); ++i) {
    if (body[i] == ',' && starts_key(body.substr(i + 1))) {
      pieces.push_back(body.substr(start, i - start));
      start = i + 1;
    }
  }
  pieces.push_back(body.substr(start));
  std::string known;
  for (auto k : keys) {
    if (!known.empty()) known += ", ";
    known.append(k);
  }
  std::vector<KeyValue> out;
  for (auto piece : pieces) {
    const auto eq = piece.find('=');
    const std::string_view key = piece.substr(0, eq);
    bool ok = eq != std::string_view::npos;
    if (ok) {
      ok = false;
      for (auto k : keys) ok = ok || k == key;
    }
    if (!ok) {
      bad(field, std::string(what) + ": expected key=value pairs with keys " + known + ", got \"" +
                     std::string(piece) + "\"");
    }
    for (const auto& kv : out) {
      if (kv.key == key) bad(field, std::string(what) + ": '" + std::string(key) + "' given twice");
    }
    out.push_back({key, piece.substr(eq + 1)});
  }
  return out;
}

const KeyValue* find(const std::vector<KeyValue>& kvs, std::string_view key) {
  for (const auto& kv : kvs) {
    if (kv.key == key) return &kv;
  }
  return nullptr;
}

std::string_view require(const std::vector<KeyValue>& kvs, std::string_view key, std::string_view field,
                         std::string_view what) {
  const KeyValue* kv = find(kvs, key);
  if (kv == nullptr) bad(field, std::string(what) + ": missing " + std::string(key) + "=");
  return kv->value;
}

std::int64_t count_value(std::string_view text, std::string_view field, std::string_view name) {
  std::int64_t v = 0;
  if (detail::parse_non_negative(text, v) != detail::DecimalStatus::ok) {
    bad(field, std::string(name) + ": expected a non-negative integer, got \"" + std::string(text) + "\"");
  }
  return v;
}

// `text` read as a decimal in billionths into `scaled`. Too large or too precise is refused
// as such here; any other failure is the caller's to word (what it expected).
detail::DecimalStatus billionths(std::string_view text, std::string_view field, std::string_view name,
                                 std::int64_t& scaled) {
  const auto status = detail::parse_scaled_decimal(text, 9, scaled);
  if (status == detail::DecimalStatus::overflow || status == detail::DecimalStatus::too_precise) {
    bad(field, std::string(name) + ": " + detail::describe(status, "\"" + std::string(text) + "\"") +
                   (status == detail::DecimalStatus::too_precise ? " (9 decimal places at most)" : ""));
  }
  return status;
}

double positive_decimal(std::string_view text, std::string_view field, std::string_view name) {
  std::int64_t scaled = 0;
  const auto status = billionths(text, field, name, scaled);
  if (status != detail::DecimalStatus::ok || scaled == 0) {
    bad(field, std::string(name) + ": expected a positive decimal number (no exponent), got \"" + std::string(text) + "\"");
  }
  return static_cast<double>(scaled) / 1e9;
}

// "a..b" with `parse` for each end.
template <typename P>
std::pair<std::int64_t, std::int64_t> range(std::string_view body, std::string_view field, std::string_view what,
                                            P&& parse) {
  const auto dots = body.find("..");
  if (dots == std::string_view::npos) {
    bad(field, std::string(what) + ": expected a range low..high, got \"" + std::string(body) + "\"");
  }
  const auto low = parse(body.substr(0, dots));
  const auto high = parse(body.substr(dots + 2));
  if (low > high) bad(field, std::string(what) + ": the range's low end is above its high end");
  return {low, high};
}

// `per_unit` and `unit` say the figures in the unit the user wrote them in (1e9 and "s" for
// durations held in ns).
void check_lognormal(double mean, double p99, std::string_view field, double per_unit = 1, const char* unit = "") {
  double mu = 0;
  double sigma = 0;
  if (!detail::lognormal_from_mean_p99(mean, p99, mu, sigma)) {
    bad(field, "lognormal: p99 / mean must be above 1 and below 14.97 (the most a lognormal's p99 can exceed its "
               "mean), got p99 " + detail::plain_number(p99 / per_unit) + unit + " and mean " +
                   detail::plain_number(mean / per_unit) + unit);
  }
}

}  // namespace

namespace detail {

bool lognormal_from_mean_p99(double mean, double p99, double& mu, double& sigma) {
  if (!(mean > 0) || !(p99 > mean)) return false;
  const double z = kNormalZ99;
  const double disc = z * z - 2.0 * det_log(p99 / mean);
  if (!(disc > 0)) return false;
  sigma = z - std::sqrt(disc);
  mu = det_log(mean) - sigma * sigma / 2.0;
  return true;
}

std::string plain_number(double v) {
  std::string s = std::to_string(v);
  while (!s.empty() && s.back() == '0') s.pop_back();
  if (!s.empty() && s.back() == '.') s.pop_back();
  return s;
}

}  // namespace detail

CountDistribution parse_count_distribution(std::string_view text, std::string_view field) {
  CountDistribution d;
  d.text = std::string(text);
  const Spec spec = split_kind(text);
  const std::string_view kind = spec.has_kind ? spec.kind : "constant";
  if (kind == "constant" || kind == "fixed") {
    d.kind = CountDistribution::Kind::constant;
    std::int64_t v = 0;
    if (detail::parse_non_negative(spec.body, v) != detail::DecimalStatus::ok) {
      bad(field, "expected a count such as 512, uniform:8000..32000, lognormal:mean=1155,p99=4142, "
                 "choice:1=0.9,4=0.1 or empirical:FILE, got \"" + std::string(text) + "\"");
    }
    d.value = v;
  } else if (kind == "uniform") {
    d.kind = CountDistribution::Kind::uniform;
    std::tie(d.low, d.high) =
        range(spec.body, field, "uniform", [&](std::string_view t) { return count_value(t, field, "uniform"); });
  } else if (kind == "lognormal") {
    d.kind = CountDistribution::Kind::lognormal;
    const auto kvs = key_values(spec.body, {"mean", "p99", "min", "max"}, field, "lognormal");
    d.mean = positive_decimal(require(kvs, "mean", field, "lognormal"), field, "lognormal mean");
    d.p99 = positive_decimal(require(kvs, "p99", field, "lognormal"), field, "lognormal p99");
    if (const auto* kv = find(kvs, "min")) d.min = count_value(kv->value, field, "lognormal min");
    if (const auto* kv = find(kvs, "max")) d.max = count_value(kv->value, field, "lognormal max");
    if (d.min > d.max) bad(field, "lognormal: min is above max");
    check_lognormal(d.mean, d.p99, field);
  } else if (kind == "choice") {
    d.kind = CountDistribution::Kind::choice;
    std::size_t start = 0;
    std::int64_t total = 0;
    while (start <= spec.body.size()) {
      auto end = spec.body.find(',', start);
      if (end == std::string_view::npos) end = spec.body.size();
      const std::string_view item = spec.body.substr(start, end - start);
      const auto eq = item.find('=');
      std::int64_t weight = 0;
      if (eq == std::string_view::npos ||
          detail::parse_scaled_decimal(item.substr(eq + 1), 9, weight) != detail::DecimalStatus::ok) {
        bad(field, "choice: expected value=weight pairs such as 1=0.9,4=0.1, got \"" + std::string(item) + "\"");
      }
      const std::int64_t value = count_value(item.substr(0, eq), field, "choice");
      for (const auto& c : d.choices) {
        if (c.first == value) bad(field, "choice: the value " + std::to_string(value) + " is given twice");
      }
      d.choices.emplace_back(value, weight);
      if (__builtin_add_overflow(total, weight, &total)) bad(field, "choice: the weights are too large");
      start = end + 1;
    }
    if (total == 0) bad(field, "choice: the weights add up to 0");
  } else if (kind == "empirical") {
    d.kind = CountDistribution::Kind::empirical;
    if (spec.body.empty()) bad(field, "empirical: expected a trace file, as in empirical:traces/chat-mix.csv");
    d.path = std::string(spec.body);
  } else {
    bad(field, "unknown distribution \"" + std::string(kind) +
                   "\" (known: constant, uniform, lognormal, choice, empirical; e.g. lognormal:mean=1155,p99=4142)");
  }
  return d;
}

DurationDistribution parse_duration_distribution(std::string_view text, std::string_view field) {
  DurationDistribution d;
  d.text = std::string(text);
  const Spec spec = split_kind(text);
  const std::string_view kind = spec.has_kind ? spec.kind : "constant";
  const auto duration = [&](std::string_view t) { return parse_duration_ns(t, field); };
  if (kind == "constant" || kind == "fixed") {
    d.kind = DurationDistribution::Kind::constant;
    d.value_ns = duration(spec.body);
  } else if (kind == "uniform") {
    d.kind = DurationDistribution::Kind::uniform;
    std::tie(d.low_ns, d.high_ns) = range(spec.body, field, "uniform", duration);
  } else if (kind == "exp" || kind == "exponential") {
    d.kind = DurationDistribution::Kind::exponential;
    std::string_view mean = spec.body;
    if (mean.substr(0, 5) == "mean=") mean.remove_prefix(5);
    d.value_ns = duration(mean);
    if (d.value_ns == 0) bad(field, "exp: the mean must be above 0");
  } else if (kind == "lognormal") {
    d.kind = DurationDistribution::Kind::lognormal;
    const auto kvs = key_values(spec.body, {"mean", "p99"}, field, "lognormal");
    d.value_ns = duration(require(kvs, "mean", field, "lognormal"));
    d.p99_ns = duration(require(kvs, "p99", field, "lognormal"));
    check_lognormal(static_cast<double>(d.value_ns), static_cast<double>(d.p99_ns), field, 1e9, "s");
  } else {
    bad(field, "unknown duration distribution \"" + std::string(kind) +
                   "\" (known: a constant such as 5s, uniform:1s..30s, exp:20s, lognormal:mean=5s,p99=60s)");
  }
  return d;
}

ArrivalProcess parse_arrival_process(std::string_view text, std::string_view field) {
  ArrivalProcess a;
  const Spec spec = split_kind(text);
  if (spec.kind == "poisson") {
    a.kind = ArrivalProcess::Kind::poisson;
    const auto kvs = key_values(spec.body, {"rate"}, field, "poisson");
    a.rate_per_s = parse_rate_per_s(require(kvs, "rate", field, "poisson"), field);
  } else if (spec.kind == "gamma") {
    a.kind = ArrivalProcess::Kind::gamma;
    const auto kvs = key_values(spec.body, {"rate", "cv"}, field, "gamma");
    a.rate_per_s = parse_rate_per_s(require(kvs, "rate", field, "gamma"), field);
    a.cv = positive_decimal(require(kvs, "cv", field, "gamma"), field, "gamma cv");
  } else if (spec.kind == "onoff") {
    a.kind = ArrivalProcess::Kind::onoff;
    const auto kvs = key_values(spec.body, {"rate", "on", "off", "off_rate"}, field, "onoff");
    a.rate_per_s = parse_rate_per_s(require(kvs, "rate", field, "onoff"), field);
    a.on_ns = parse_duration_ns(require(kvs, "on", field, "onoff"), field);
    a.off_ns = parse_duration_ns(require(kvs, "off", field, "onoff"), field);
    if (a.on_ns == 0) bad(field, "onoff: the on period must be longer than 0");
    // Without an off period the process never leaves its on rate: off_rate could not act.
    if (a.off_ns == 0) bad(field, "onoff: the off period must be longer than 0 (without one, use poisson:rate=R)");
    if (const auto* kv = find(kvs, "off_rate")) {
      std::int64_t scaled = 0;
      if (detail::parse_scaled_decimal(kv->value, 9, scaled) != detail::DecimalStatus::ok) {
        bad(field, "onoff: off_rate: expected a non-negative number, got \"" + std::string(kv->value) + "\"");
      }
      a.off_rate_per_s = static_cast<double>(scaled) / 1e9;
    }
  } else {
    bad(field, "expected an arrival process: poisson:rate=5.5, gamma:rate=2.6,cv=3 or "
               "onoff:rate=20,on=10s,off=50s[,off_rate=0.5]; got \"" + std::string(text) + "\"");
  }
  return a;
}

MaxTokensPolicy parse_max_tokens_policy(std::string_view text, std::string_view field) {
  MaxTokensPolicy p;
  const Spec spec = split_kind(text);
  if (!spec.has_kind && text == "none") {
    p.kind = MaxTokensPolicy::Kind::none;
  } else if (!spec.has_kind && text == "output") {
    p.kind = MaxTokensPolicy::Kind::output;
  } else if (spec.kind == "factor") {
    p.kind = MaxTokensPolicy::Kind::factor;
    const auto status = billionths(spec.body, field, "factor", p.factor_ppb);
    if (status != detail::DecimalStatus::ok || p.factor_ppb < kBillion) {
      bad(field, "factor: expected a number of at least 1 (max_tokens = ceil(output_tokens * factor)), got \"" +
                     std::string(spec.body) + "\"");
    }
  } else if (spec.kind == "fixed" || spec.kind == "cap") {
    p.kind = MaxTokensPolicy::Kind::cap;
    p.cap = parse_count_distribution(spec.kind == "fixed" ? text : spec.body, field);
    if (p.cap.kind == CountDistribution::Kind::empirical) bad(field, "cap: an empirical cap is not supported");
    // A limit of 0 would leave requests nothing to generate (engines require max_tokens >= 1).
    const bool zero = (p.cap.kind == CountDistribution::Kind::constant && p.cap.value == 0) ||
                      (p.cap.kind == CountDistribution::Kind::uniform && p.cap.low == 0) ||
                      std::any_of(p.cap.choices.begin(), p.cap.choices.end(), [](const auto& c) { return c.first == 0; });
    if (zero) bad(field, "a generation limit of 0 tokens: engines require max_tokens >= 1");
  } else {
    bad(field, "expected none, output, factor:1.5, fixed:1024 or cap:<count>, got \"" + std::string(text) + "\"");
  }
  return p;
}

CancelClause parse_cancel_clause(std::string_view text, std::string_view field) {
  const auto kvs = key_values(text, {"p", "after"}, field, "cancellation");
  CancelClause c;
  c.probability_ppb = parse_probability_ppb(require(kvs, "p", field, "cancellation"), field);
  c.after = parse_duration_distribution(require(kvs, "after", field, "cancellation"), field);
  return c;
}

SystemPrompt parse_system_prompt(std::string_view text, std::string_view field) {
  const auto kvs = key_values(text, {"tokens", "share"}, field, "system prompt");
  SystemPrompt s;
  s.tokens = count_value(require(kvs, "tokens", field, "system prompt"), field, "tokens");
  if (s.tokens < 1) bad(field, "system prompt: tokens must be at least 1");
  s.share_ppb = parse_probability_ppb(require(kvs, "share", field, "system prompt"), field);
  return s;
}

SessionModel parse_session_model(std::string_view text, std::string_view field) {
  const auto kvs = key_values(text, {"share", "turns", "gap", "user", "max_context"}, field, "sessions");
  SessionModel s;
  s.share_ppb = parse_probability_ppb(require(kvs, "share", field, "sessions"), field);
  s.turns = parse_count_distribution(require(kvs, "turns", field, "sessions"), field);
  // Sessions that can never have a second turn are plain requests: gap, user and max_context
  // would never act.
  const CountDistribution& t = s.turns;
  std::int64_t most_turns = std::numeric_limits<std::int64_t>::max();
  if (t.kind == CountDistribution::Kind::constant) most_turns = t.value;
  if (t.kind == CountDistribution::Kind::uniform) most_turns = t.high;
  if (t.kind == CountDistribution::Kind::choice) {
    most_turns = 0;
    for (const auto& [turns, weight] : t.choices) {
      if (weight > 0) most_turns = std::max(most_turns, turns);
    }
  }
  if (most_turns < 2) bad(field, "sessions: turns never exceed 1, so no session has a second turn: give at least 2");
  s.gap = parse_duration_distribution(require(kvs, "gap", field, "sessions"), field);
  if (const auto* kv = find(kvs, "user")) s.user_tokens = parse_count_distribution(kv->value, field);
  if (const auto* kv = find(kvs, "max_context")) {
    s.max_context_tokens = count_value(kv->value, field, "max_context");
    // 0 is the model's "no limit", which leaving the key out says: given, it would read as a
    // limit that never applies.
    if (s.max_context_tokens < 1) bad(field, "sessions: max_context must be at least 1 (leave it out for no limit)");
  }
  return s;
}

std::int64_t parse_probability_ppb(std::string_view text, std::string_view field) {
  std::int64_t ppb = 0;
  const bool percent = !text.empty() && text.back() == '%';
  const auto status = detail::parse_scaled_decimal(percent ? text.substr(0, text.size() - 1) : text, percent ? 7 : 9, ppb);
  if (status != detail::DecimalStatus::ok || ppb > kBillion) {
    bad(field, "expected a probability between 0 and 1 (or a percentage such as 5%), got \"" + std::string(text) + "\"");
  }
  return ppb;
}

double parse_rate_per_s(std::string_view text, std::string_view field) {
  std::int64_t scaled = 0;
  const auto status = detail::parse_scaled_decimal(text, 9, scaled);
  if (status == detail::DecimalStatus::overflow) {
    bad(field, "\"" + std::string(text) + "\" is too large (the largest is 9223372036 requests per second)");
  }
  if (status == detail::DecimalStatus::too_precise) {
    bad(field, "\"" + std::string(text) + "\" has more than 9 decimal places (the rate is kept in billionths)");
  }
  if (status != detail::DecimalStatus::ok || scaled == 0) {
    bad(field, "expected a positive decimal number of requests per second (no exponent), got \"" + std::string(text) + "\"");
  }
  return static_cast<double>(scaled) / 1e9;
}

std::uint64_t parse_seed(std::string_view text, std::string_view field) {
  std::uint64_t seed = 0;
  if (detail::parse_u64(text, seed) != detail::DecimalStatus::ok) {
    bad(field, "expected an unsigned 64-bit integer, got \"" + std::string(text) + "\"");
  }
  return seed;
}

std::int64_t parse_positive_count(std::string_view text, std::string_view field) {
  std::int64_t v = 0;
  if (detail::parse_non_negative(text, v) != detail::DecimalStatus::ok || v < 1) {
    bad(field, "expected an integer of at least 1, got \"" + std::string(text) + "\"");
  }
  return v;
}

}  // namespace kvsim
