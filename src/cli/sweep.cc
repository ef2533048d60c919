#include "sweep.h"

#include <fmt/core.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>

#include "cli.h"
#include "kvsim/error.h"
#include "kvsim/parse.h"
#include "kvsim/units.h"

namespace kvsim::cli {
namespace {

constexpr char kVary[] = "--vary";
constexpr char kShard[] = "--shard";

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

// The values of "V1,V2,[V,3]": split at commas outside brackets, each trimmed, brackets
// removed. Returns the problem, or "" when the list is well formed.
std::string split_values(std::string_view text, std::vector<std::string>& values) {
  std::string current;
  bool bracketed = false;  // the current value opened with '['
  bool closed = false;     // ... and its ']' was met
  const auto finish = [&]() -> std::string {
    const std::string value(trim(current));
    if (bracketed && !closed) return "a '[' is not closed";
    if (value.empty() && !bracketed) return "an empty value (two commas in a row, or one at an end)";
    values.push_back(value);
    current.clear();
    bracketed = closed = false;
    return "";
  };
  for (char c : text) {
    if (bracketed && !closed) {
      if (c == ']') closed = true;
      else current += c;
    } else if (c == ',') {
      if (auto problem = finish(); !problem.empty()) return problem;
    } else if (c == '[' && trim(current).empty()) {
      current.clear();
      bracketed = true;
    } else if (closed && c != ' ' && c != '\t') {
      return "text after a ']' (a bracketed value ends at its ']')";
    } else {
      if (c == '[' || c == ']') return "a bracket inside a value (brackets enclose a whole value)";
      current += c;
    }
  }
  return finish();
}

SweepAxis parse_axis(std::string_view text, const Location& where) {
  const auto eq = text.find('=');
  SweepAxis axis;
  axis.name = std::string(trim(text.substr(0, eq)));
  if (eq == std::string_view::npos || axis.name.empty()) {
    throw InputError(where, "expected NAME=V1,V2,... (a replay option's long name, then its values), got \"" +
                                printable(text) + "\"");
  }
  if (axis.name.rfind("--", 0) == 0) axis.name.erase(0, 2);  // --vary --kv-budget=... reads as meant
  if (const auto problem = split_values(text.substr(eq + 1), axis.values); !problem.empty()) {
    throw InputError(where, axis.name + ": " + problem + " in \"" + printable(text) + "\"");
  }
  // A value twice would run the same points twice, as two points of the grid.
  for (std::size_t i = 1; i < axis.values.size(); ++i) {
    if (std::find(axis.values.begin(), axis.values.begin() + static_cast<std::ptrdiff_t>(i), axis.values[i]) !=
        axis.values.begin() + static_cast<std::ptrdiff_t>(i)) {
      throw InputError(where, axis.name + ": \"" + printable(axis.values[i]) + "\" is given twice in \"" +
                                  printable(text) + "\"");
    }
  }
  axis.file = where.file;
  axis.line = where.line;
  return axis;
}

}  // namespace

SweepAxis parse_vary(std::string_view text) { return parse_axis(text, Location{"", 0, kVary}); }

std::vector<SweepAxis> read_sweep_spec(const std::string& path) {
  const std::string text = read_input(path);
  std::vector<SweepAxis> axes;
  std::int64_t line_no = 0;
  for (std::size_t at = 0; at < text.size();) {
    const auto end = std::min(text.find('\n', at), text.size());
    std::string_view line(text.data() + at, end - at);
    at = end + 1;
    ++line_no;
    if (const auto hash = line.find('#'); hash != std::string_view::npos) line = line.substr(0, hash);
    if (trim(line).empty()) continue;
    axes.push_back(parse_axis(trim(line), Location{path, line_no, ""}));
  }
  if (axes.empty()) throw InputError(Location{path, 0, ""}, "no axis: expected lines of NAME = V1, V2, ...");
  return axes;
}

SweepGrid::SweepGrid(std::vector<SweepAxis> axes) : axes_(std::move(axes)) {
  for (const auto& axis : axes_) {
    if (axis.values.empty()) continue;  // parse_axis never leaves one empty
    if (points_ > kMaxPoints / static_cast<std::int64_t>(axis.values.size())) {
      throw InputError(Location{"", 0, kVary}, fmt::format("the grid has more than {} points", with_commas(kMaxPoints)));
    }
    points_ *= static_cast<std::int64_t>(axis.values.size());
  }
}

std::vector<std::string> SweepGrid::values_at(std::int64_t p) const {
  std::vector<std::string> out(axes_.size());
  for (std::size_t k = axes_.size(); k-- > 0;) {
    const auto n = static_cast<std::int64_t>(axes_[k].values.size());
    out[k] = axes_[k].values[static_cast<std::size_t>(p % n)];
    p /= n;
  }
  return out;
}

Shard parse_shard(std::string_view text) {
  const auto slash = text.find('/');
  const auto bad = [&](const std::string& why) {
    return InputError(Location{"", 0, kShard},
                      "expected I/N with 1 <= I <= N (the I-th of N parts, e.g. 2/8), got \"" + printable(text) +
                          "\"" + why);
  };
  if (slash == std::string_view::npos) throw bad("");
  Shard s;
  try {
    s.index = parse_positive_integer(text.substr(0, slash), kShard);
    s.count = parse_positive_integer(text.substr(slash + 1), kShard);
  } catch (const InputError&) {
    throw bad("");
  }
  if (s.index > s.count) throw bad(": I is larger than N");
  return s;
}

std::string Fingerprint::hex() const { return fmt::format("{:016x}", h_); }

std::string grid_fingerprint(std::string_view text) { return Fingerprint{}.add(text).hex(); }

std::vector<std::string> split_csv_line(std::string_view line) {
  std::vector<std::string> fields(1);
  bool quoted = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        fields.back() += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        fields.back() += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      fields.emplace_back();
    } else {
      fields.back() += c;
    }
  }
  return fields;
}

SweepFileKind sweep_file_kind(const std::vector<std::string>& paths) {
  // An empty part is a JSONL one (a CSV part has its header line): the first part with a
  // byte says which.
  for (const std::string& path : paths) {
    const std::string text = read_input(path);
    if (!text.empty()) return text.front() == '{' ? SweepFileKind::jsonl : SweepFileKind::csv;
  }
  return SweepFileKind::jsonl;
}

namespace {

// One row of a part: where it is, which point, and its bytes (newline included).
struct PartRow {
  std::int64_t point = 0;
  std::int64_t point_rows = 0;  // the rows its point has (one per run: allocators, replicas)
  std::size_t part = 0;
  std::int64_t line = 0;
  std::string_view bytes;
};

// The leading columns of a row: point, points, grid, point_rows. Throws naming the file and
// line.
void read_leading(const std::string& path, std::int64_t line_no, std::string_view line, SweepFileKind kind,
                  std::int64_t& point, std::int64_t& points, std::string& grid, std::int64_t& point_rows) {
  const Location where{path, line_no, ""};
  refuse_nul_bytes(line, where);  // the row is copied into the merged file as it stands
  // A bad integer names the file and line, not only the column.
  const auto parse_positive_integer = [&](std::string_view text, const char* column) {
    try {
      return kvsim::parse_positive_integer(text, column);
    } catch (const InputError& e) {
      throw InputError(Location{path, line_no, column}, e.problem());
    }
  };
  if (kind == SweepFileKind::csv) {
    std::vector<std::string> f;
    std::size_t at = 0;
    for (int k = 0; k < 4; ++k) {
      const auto comma = line.find(',', at);
      if (comma == std::string_view::npos) throw InputError(where, "expected a row starting point,points,grid,point_rows");
      f.emplace_back(line.substr(at, comma - at));
      at = comma + 1;
    }
    point = f[0] == "0" ? 0 : parse_positive_integer(f[0], "point");
    points = parse_positive_integer(f[1], "points");
    grid = f[2];
    point_rows = parse_positive_integer(f[3], "point_rows");
  } else {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception&) {
      throw InputError(where, "not a JSON object on one line (is it a CSV part? merge parts of one kind)");
    }
    const auto count = [&](const char* key) { return j.contains(key) && j[key].is_number_unsigned(); };
    if (!j.is_object() || !count("point") || !count("points") || !j.contains("grid") || !j["grid"].is_string() ||
        !count("point_rows")) {
      throw InputError(where, "expected a row of kvsim sweep --jsonl (with point, points, grid and point_rows)");
    }
    point = j["point"].get<std::int64_t>();
    points = j["points"].get<std::int64_t>();
    grid = j["grid"].get<std::string>();
    point_rows = j["point_rows"].get<std::int64_t>();
    if (points <= 0) throw InputError(Location{path, line_no, "points"}, "expected a positive integer");
    if (point_rows <= 0) throw InputError(Location{path, line_no, "point_rows"}, "expected a positive integer");
  }
}

}  // namespace

std::string merge_sweep_parts(const std::vector<std::string>& paths, SweepFileKind kind) {
  std::vector<std::string> texts;
  texts.reserve(paths.size());
  for (const auto& path : paths) {
    // A part saved with CRLF line endings (an editor, a Windows copy) is the same rows.
    std::string text = read_input(path);
    if (text.find('\r') != std::string::npos) {
      std::string lf;
      lf.reserve(text.size());
      for (std::size_t i = 0; i < text.size(); ++i) {
        if (!(text[i] == '\r' && i + 1 < text.size() && text[i + 1] == '\n')) lf += text[i];
      }
      text = std::move(lf);
    }
    texts.push_back(std::move(text));
  }
  std::optional<std::string> header;
  std::size_t header_part = 0;
  std::int64_t points = 0;
  std::string grid;
  std::size_t grid_part = 0;
  std::vector<PartRow> rows;
  for (std::size_t part = 0; part < paths.size(); ++part) {
    const std::string& path = paths[part];
    const std::string& text = texts[part];
    // A shard with no point (more shards than points) writes a JSONL part with no row.
    if (text.empty() && kind == SweepFileKind::jsonl) continue;
    if (text.empty()) throw InputError(Location{path, 0, ""}, "empty: a CSV part has at least its header line");
    if (text.back() != '\n') throw InputError(Location{path, 0, ""}, "does not end with a newline: was it cut short?");
    std::int64_t line_no = 0;
    std::int64_t last_point = -1;
    for (std::size_t at = 0; at < text.size();) {
      const auto end = text.find('\n', at) + 1;
      const std::string_view bytes(text.data() + at, end - at);
      const std::string_view line = bytes.substr(0, bytes.size() - 1);
      at = end;
      ++line_no;
      if (kind == SweepFileKind::csv && line_no == 1) {
        if (line.rfind("point,points,grid,", 0) != 0) {
          throw InputError(Location{path, 1, ""}, "not a CSV part of kvsim sweep (its header starts "
                                                  "point,points,grid,point_rows); merge parts of one kind");
        }
        if (line.rfind("point,points,grid,point_rows,", 0) != 0) {
          throw InputError(Location{path, 1, ""}, "written by an older kvsim sweep (no point_rows column after "
                                                  "grid): run the sweep again");
        }
        if (!header) {
          header = std::string(bytes);
          header_part = part;
        } else if (*header != bytes) {
          throw InputError(Location{path, 1, ""}, "its columns differ from those of " + paths[header_part] +
                                                      ": parts of different sweeps");
        }
        continue;
      }
      PartRow row{0, 0, part, line_no, bytes};
      std::int64_t row_points = 0;
      std::string row_grid;
      read_leading(path, line_no, line, kind, row.point, row_points, row_grid, row.point_rows);
      if (points == 0) {
        points = row_points;
        grid = row_grid;
        grid_part = part;
      } else if (row_points != points || row_grid != grid) {
        throw InputError(Location{path, line_no, row_points != points ? "points" : "grid"},
                         fmt::format("from another grid than {} ({} points, grid {}; this row: {} points, grid {})",
                                     paths[grid_part], points, grid, row_points, row_grid));
      }
      if (row.point >= points) {
        throw InputError(Location{path, line_no, "point"}, fmt::format("{} is not below points ({})", row.point, points));
      }
      if (row.point < last_point) {
        throw InputError(Location{path, line_no, "point"},
                         fmt::format("{} after {}: a sweep writes its points in order", row.point, last_point));
      }
      last_point = row.point;
      rows.push_back(row);
    }
  }
  if (rows.empty()) throw InputError(Location{paths.front(), 0, ""}, "no rows in any part: nothing to merge");
  // Every point once: its rows all from one place in one part.
  std::stable_sort(rows.begin(), rows.end(), [](const PartRow& a, const PartRow& b) { return a.point < b.point; });
  std::vector<std::int64_t> missing;
  std::int64_t expected = 0;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const PartRow& r = rows[i];
    if (i > 0 && rows[i - 1].point == r.point) {
      const PartRow& q = rows[i - 1];
      if (q.part != r.part || q.line + 1 != r.line) {
        throw InputError(Location{paths[r.part], r.line, "point"},
                         fmt::format("point {} appears twice: also at {}:{} (a shard given twice, or shards of "
                                     "different --shard counts?)",
                                     r.point, paths[q.part], q.line));
      }
      continue;
    }
    for (; expected < r.point; ++expected) missing.push_back(expected);
    expected = r.point + 1;
  }
  for (; expected < points; ++expected) missing.push_back(expected);
  if (!missing.empty()) {
    std::string list;
    for (std::size_t i = 0; i < std::min<std::size_t>(missing.size(), 10); ++i) {
      list += (i > 0 ? ", " : "") + std::to_string(missing[i]);
    }
    if (missing.size() > 10) list += ", ...";
    throw InputError(Location{paths.front(), 0, ""},
                     fmt::format("{} of the grid's {} points are in none of the {} parts (points {}): a shard is "
                                 "missing or did not finish",
                                 missing.size(), points, paths.size(), list));
  }
  // And every point whole: each row says how many its point has (one per run: allocator,
  // replica, the replicas' total), so a part cut short at a line's end shows.
  for (std::size_t first = 0, end = 0; first < rows.size(); first = end) {
    end = first;
    while (end < rows.size() && rows[end].point == rows[first].point) ++end;
    const PartRow& r = rows[first];
    for (std::size_t i = first; i < end; ++i) {
      if (rows[i].point_rows != r.point_rows) {
        throw InputError(Location{paths[rows[i].part], rows[i].line, "point_rows"},
                         fmt::format("{} where the row above says {}: rows of different sweeps?", rows[i].point_rows,
                                     r.point_rows));
      }
    }
    if (static_cast<std::int64_t>(end - first) != r.point_rows) {
      throw InputError(Location{paths[r.part], r.line, "point"},
                       fmt::format("point {} has {} rows where its point_rows says {}: a part cut short at a line's "
                                   "end?",
                                   r.point, end - first, r.point_rows));
    }
  }
  std::string out = header.value_or("");
  for (const auto& r : rows) out += r.bytes;
  return out;
}

}  // namespace kvsim::cli
