// Plain-text tables for the `size` and `models` sheets: columns padded to their widest cell,
// text left-aligned and numbers right-aligned, two spaces between columns. Deterministic, no
// terminal probing.
#ifndef KVSIM_SRC_CLI_SHEET_TABLE_H_
#define KVSIM_SRC_CLI_SHEET_TABLE_H_

#include <algorithm>
#include <string>
#include <vector>

namespace kvsim::cli {

class SheetTable {
 public:
  enum class Align { left, right };

  // One header per column; `align` has one entry per column.
  SheetTable(std::vector<std::string> headers, std::vector<Align> align)
      : headers_(std::move(headers)), align_(std::move(align)) {}

  void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }

  // The table, each line prefixed by `indent` and ending in '\n'; trailing spaces trimmed.
  std::string render(const std::string& indent = "  ") const {
    std::vector<std::size_t> width(headers_.size(), 0);
    auto measure = [&](const std::vector<std::string>& row) {
      for (std::size_t i = 0; i < row.size() && i < width.size(); ++i) width[i] = std::max(width[i], row[i].size());
    };
    measure(headers_);
    for (const auto& r : rows_) measure(r);
    std::string out;
    auto line = [&](const std::vector<std::string>& row) {
      std::string text = indent;
      for (std::size_t i = 0; i < width.size(); ++i) {
        const std::string cell = i < row.size() ? row[i] : "";
        const std::string pad(width[i] - cell.size(), ' ');
        text += (align_[i] == Align::right ? pad + cell : cell + pad);
        if (i + 1 < width.size()) text += "  ";
      }
      while (!text.empty() && text.back() == ' ') text.pop_back();
      out += text + "\n";
    };
    line(headers_);
    for (const auto& r : rows_) line(r);
    return out;
  }

 private:
  std::vector<std::string> headers_;
  std::vector<Align> align_;
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace kvsim::cli

#endif  // KVSIM_SRC_CLI_SHEET_TABLE_H_
