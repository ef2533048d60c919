#include "kvsim/parse.h"
#include "kvsim/units.h"

#include <catch2/catch.hpp>
#include <cstdint>
#include <limits>

#include "kvsim/error.h"

using namespace kvsim;

TEST_CASE("bytes print in GiB and GB with exact rounding") {
  // The seed's worked example: 4,026,531,840 bytes is exactly 3.75 GiB.
  CHECK(format_gib(4'026'531'840) == "3.75 GiB");
  CHECK(format_gib(671'088'640, 3) == "0.625 GiB");
  CHECK(format_gb(4'026'531'840) == "4.03 GB");
  // Half away from zero: 0.125 GiB to two places is 0.13.
  CHECK(format_ratio(kBytesPerGiB / 8, kBytesPerGiB, 2) == "0.13");
  CHECK(format_ratio(0, kBytesPerGiB, 2) == "0.00");
  CHECK(format_ratio(std::numeric_limits<std::int64_t>::max(), 1, 0) == "9223372036854775807");
}

TEST_CASE("with_commas groups thousands") {
  CHECK(with_commas(0) == "0");
  CHECK(with_commas(999) == "999");
  CHECK(with_commas(1000) == "1,000");
  CHECK(with_commas(20'132'659'200) == "20,132,659,200");
  CHECK(with_commas(-1234567) == "-1,234,567");
  CHECK(with_commas(std::numeric_limits<std::int64_t>::min()) == "-9,223,372,036,854,775,808");
}

TEST_CASE("byte sizes parse exactly in decimal and binary units") {
  CHECK(parse_byte_size("123456", "--kv-budget") == 123456);
  CHECK(parse_byte_size("80GB", "--kv-budget") == 80'000'000'000);
  CHECK(parse_byte_size("74.5 GiB", "--kv-budget") == 79'993'765'888);
  CHECK(parse_byte_size("1.5KiB", "--kv-budget") == 1536);
  // Fractional bytes round down: 0.1 GiB is 107374182.4 bytes.
  CHECK(parse_byte_size("0.1GiB", "--kv-budget") == 107'374'182);
  CHECK_THROWS_AS(parse_byte_size("-1GB", "--kv-budget"), InputError);
  CHECK_THROWS_AS(parse_byte_size("12 parsecs", "--kv-budget"), InputError);
  CHECK_THROWS_AS(parse_byte_size("", "--kv-budget"), InputError);
  CHECK_THROWS_AS(parse_byte_size("99999999999TiB", "--kv-budget"), InputError);
  CHECK_THROWS_WITH(parse_byte_size("1e9", "--kv-budget"),
                    Catch::Contains("--kv-budget") && Catch::Contains("\"1e9\""));
  // A fraction of one byte is a mistake, never truncated to a 1-byte budget; zeros after the
  // point are whole.
  CHECK_THROWS_WITH(parse_byte_size("1.5", "--kv-budget"),
                    Catch::Contains("--kv-budget") && Catch::Contains("not a whole number of bytes"));
  CHECK_THROWS_AS(parse_byte_size("2.25B", "--kv-budget"), InputError);
  CHECK(parse_byte_size("7.0", "--kv-budget") == 7);
  CHECK(parse_byte_size("7.", "--kv-budget") == 7);
}

TEST_CASE("a parameter count is whole unless it is in millions, billions or trillions, and may be any 64-bit count") {
  CHECK(parse_parameter_count("8030261248", "--params") == 8'030'261'248);
  CHECK(parse_parameter_count("8.03B", "--params") == 8'030'000'000);
  CHECK(parse_parameter_count("350M", "--params") == 350'000'000);
  CHECK_THROWS_WITH(parse_parameter_count("1.5", "--params"),
                    Catch::Contains("--params") && Catch::Contains("whole"));
  // Plain counts past 9,223,372,036 (= floor((2^63 - 1) / 10^9)), which were once scaled by
  // 10^9 before anything else and refused; Llama-3.1-70B's count, and trillions.
  CHECK(parse_parameter_count("70553706496", "--params") == 70'553'706'496);
  CHECK(parse_parameter_count("9223372036854775807", "--params") == 9'223'372'036'854'775'807);
  CHECK(parse_parameter_count("1.2T", "--params") == 1'200'000'000'000);
  CHECK(parse_parameter_count("0.5M", "--params") == 500'000);
  CHECK_THROWS_WITH(parse_parameter_count("9223372036854775808", "--params"), Catch::Contains("fits 64 bits"));
  CHECK_THROWS_WITH(parse_parameter_count("10000000000B", "--params"), Catch::Contains("fits 64 bits"));
  CHECK_THROWS_WITH(parse_parameter_count("0", "--params"), Catch::Contains("positive"));
  CHECK_THROWS_WITH(parse_parameter_count("1.0000000005B", "--params"), Catch::Contains("whole"));
  // A suffix kvsim does not read is named as one (thousands are not a scale of parameters).
  CHECK_THROWS_WITH(parse_parameter_count("1.5K", "--params"),
                    Catch::Contains("--params: expected a count whose suffix is T, B or M (1.2T, 8.03B, 350M), got \"1.5K\""));
  CHECK_THROWS_WITH(parse_parameter_count("7X", "--params"), Catch::Contains("suffix is T, B or M"));
}

// Issue 14 item 4: a plain byte count was multiplied by 10^9 (nine fixed fractional digits)
// before anything else, so any count above 9,223,372,036 (= floor((2^63 - 1) / 10^9)) was
// refused as overflowing. torch.cuda.mem_get_info()[1] on an 80 GB card prints about 8.5e10.
TEST_CASE("plain byte counts up to 2^63 - 1 parse exactly") {
  CHECK(parse_byte_size("9223372036", "--device-memory") == 9'223'372'036);
  CHECK(parse_byte_size("9223372037", "--device-memory") == 9'223'372'037);
  // An A100-80GB's CUDA total, as deviceQuery prints it (budget.cc cites the log).
  CHECK(parse_byte_size("84987740160", "--device-memory") == 84'987'740'160);
  CHECK(parse_byte_size("85045477376B", "--weights-bytes") == 85'045'477'376);
  // 2^63 - 1 is the largest int64 and fits; 2^63 does not.
  CHECK(parse_byte_size("9223372036854775807", "--kv-budget") == std::numeric_limits<std::int64_t>::max());
  CHECK_THROWS_WITH(parse_byte_size("9223372036854775808", "--kv-budget"),
                    Catch::Contains("--kv-budget") && Catch::Contains("overflows 64 bits"));
  // With a unit the product is what must fit: 8 EiB = 2^63 bytes does not, 7.5 EiB would.
  CHECK_THROWS_WITH(parse_byte_size("8388608TiB", "--kv-budget"), Catch::Contains("overflows 64 bits"));
  CHECK(parse_byte_size("8388607.5TiB", "--kv-budget") == (std::int64_t{8388607} << 40) + (std::int64_t{1} << 39));
  // The fraction still reads exactly beside a large whole part: 10^10 + 0.5 KiB = 10240 x 10^9 + 512.
  CHECK(parse_byte_size("10000000000.5KiB", "--kv-budget") == 10'240'000'000'512);
  CHECK(parse_byte_size(".5KiB", "--kv-budget") == 512);
  CHECK(parse_byte_size("+7.", "--kv-budget") == 7);
  CHECK_THROWS_AS(parse_byte_size(".", "--kv-budget"), InputError);
  CHECK_THROWS_AS(parse_byte_size("1.2.3", "--kv-budget"), InputError);
  CHECK_THROWS_AS(parse_byte_size("-9223372037", "--kv-budget"), InputError);
}

TEST_CASE("durations parse into integer nanoseconds") {
  CHECK(parse_duration_ns("250ms", "--sample-every") == 250'000'000);
  CHECK(parse_duration_ns("1.5s", "--sample-every") == 1'500'000'000);
  CHECK(parse_duration_ns("20us", "--sample-every") == 20'000);
  CHECK(parse_duration_ns("2h", "--sample-every") == 7'200'000'000'000);
  CHECK_THROWS_WITH(parse_duration_ns("1.0005ns", "--sample-every"), Catch::Contains("finer than 1 ns"));
  CHECK_THROWS_AS(parse_duration_ns("10", "--sample-every"), InputError);
}

TEST_CASE("ceil_div is exact up to the largest value of its type") {
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();  // 2^63 - 1
  CHECK(ceil_div(std::int64_t{0}, std::int64_t{16}) == 0);
  CHECK(ceil_div(std::int64_t{17}, std::int64_t{16}) == 2);
  CHECK(ceil_div(kMax, std::int64_t{2}) == std::int64_t{1} << 62);  // (2^63 - 1) / 2 rounds up to 2^62
  CHECK(ceil_div(kMax - 1, kMax) == 1);
  CHECK(ceil_div(kMax, kMax) == 1);
  // 128 bits: (2^70 + 1) / 2^10 = 2^60 + 1/1024, up to 2^60 + 1; no truncation to 64 bits.
  __extension__ typedef __int128 Wide;
  const Wide big = (Wide{1} << 70) + 1;
  CHECK(ceil_div(big, std::int64_t{1} << 10) == (Wide{1} << 60) + 1);
}

TEST_CASE("checked arithmetic refuses to wrap") {
  CHECK(checked_mul(163'840, 4096, "bytes") == 671'088'640);
  CHECK_THROWS_WITH(checked_mul(std::int64_t{1} << 40, std::int64_t{1} << 40, "bytes per sequence"),
                    Catch::Contains("bytes per sequence overflows 64 bits"));
  CHECK_THROWS_AS(checked_add(std::numeric_limits<std::int64_t>::max(), 1, "total"), InputError);
}

#include "cli_util.h"

TEST_CASE("the program answers --help and rejects unknown commands with exit 2") {
  const auto help = test::run_cli({"--help"});
  CHECK(help.exit_code == 0);
  CHECK_THAT(help.out, Catch::Contains("replay") && Catch::Contains("size") && Catch::Contains("trace"));
  const auto bad = test::run_cli({"frobnicate"});
  CHECK(bad.exit_code == 2);
  CHECK_THAT(bad.err, Catch::Contains("unknown command 'frobnicate'"));
  const auto none = test::run_cli({});
  CHECK(none.exit_code == 2);
}
