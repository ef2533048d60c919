// How `kvsim size` presents a SizeSheet: the text sheet for people and JSON (integers as
// JSON integers) for programs. Both only format what size_sheet() computed.
#ifndef KVSIM_SRC_CLI_SIZE_OUTPUT_H_
#define KVSIM_SRC_CLI_SIZE_OUTPUT_H_

#include <string>

#include "kvsim/size_sheet.h"

namespace kvsim::cli {

// `dtype_reason` says how the KV dtype was chosen ("--dtype", "default: the model's
// torch_dtype bfloat16"); the sheet prints it beside the dtype.
std::string size_table(const SizeSheet& sheet, const std::string& dtype_reason);
std::string size_json(const SizeSheet& sheet, const std::string& dtype_reason);

}  // namespace kvsim::cli

#endif  // KVSIM_SRC_CLI_SIZE_OUTPUT_H_
