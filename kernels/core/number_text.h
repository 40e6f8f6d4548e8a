// Numbers as text that reads back as the same value.
#pragma once

#include <string>

namespace atl {

// The shortest decimal that parses back to exactly v (1e-09, 0.5, 1000000000), not
// std::to_string's six decimals, which print 1e-9 as 0.000000; "inf", "-inf" and "nan" as
// std::to_chars writes them.
std::string shortest_decimal(double v);

// "1.23 MB", "512 B": SI units (1 kB = 1000 bytes), two decimals above bytes.
std::string format_bytes(double bytes);

}  // namespace atl
