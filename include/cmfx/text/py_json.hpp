#pragma once
/// @file py_json.hpp
/// @brief JSON text exactly as Python's `json.dumps(value, ensure_ascii=False)` writes it — the serializer the
///        DeepSeek-V4 chat encoder uses for tool schemas, non-string tool arguments and response formats
///        (`to_json` in encoding_dsv4.py), so the prompt bytes match the official encoder's.
///
/// Python's defaults: separators ", " and ": "; object keys in insertion order (use nlohmann::ordered_json, whose
/// parser keeps the order and, like Python's dict, keeps a duplicated key at its first position with the last value);
/// strings escape only `"`, `\`, \n, \r, \t, \b, \f and the other controls below U+0020 (as \u00xx, lower-case hex),
/// everything else (U+007F, non-ASCII) raw; floats as `repr(float)` (shortest round-trip digits, exponent form when
/// the decimal exponent is < -4 or >= 16, ".0" appended to integral values, NaN / Infinity / -Infinity).
/// Integers print exactly as held; nlohmann keeps integers up to 64 bits (Python: unbounded — larger ones become
/// floats here, a difference only for integers above 2^64 in a request).
#include <nlohmann/json.hpp>

#include <charconv>
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>

namespace cmfx::text {

/// Appends s as a JSON string literal, Python ensure_ascii=False style.
inline void py_json_append_string(std::string& out, std::string_view s) {
  static constexpr char hex[] = "0123456789abcdef";
  out.push_back('"');
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          out += "\\u00";
          out.push_back(hex[c >> 4]);
          out.push_back(hex[c & 15]);
        } else {
          out.push_back(ch);
        }
    }
  }
  out.push_back('"');
}

/// Appends Python's repr() of a double (float_repr_style "short", format code 'r').
inline void py_float_repr(std::string& out, double v) {
  if (std::isnan(v)) {
    out += "NaN";
    return;
  }
  if (std::isinf(v)) {
    out += v > 0 ? "Infinity" : "-Infinity";
    return;
  }
  char buf[40];
  // Shortest round-trip digits: "d.ddde±XX" (or "de±XX" for one digit).
  const auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
  std::string_view sci(buf, static_cast<size_t>(r.ptr - buf));
  if (!sci.empty() && sci[0] == '-') {
    out.push_back('-');
    sci.remove_prefix(1);
  }
  const size_t epos = sci.find('e');
  std::string digits;
  for (const char c : sci.substr(0, epos))
    if (c != '.') digits.push_back(c);
  int exp10 = 0;
  std::from_chars(sci.data() + epos + (sci[epos + 1] == '+' ? 2 : 1), sci.data() + sci.size(), exp10);
  const int decpt = exp10 + 1;  // digits d1 d2 ... stand for 0.d1d2... × 10^decpt
  const int nd = static_cast<int>(digits.size());
  if (decpt <= -4 || decpt > 16) {
    out.push_back(digits[0]);
    if (nd > 1) {
      out.push_back('.');
      out.append(digits, 1, std::string::npos);
    }
    const int e = decpt - 1;
    out.push_back('e');
    out.push_back(e < 0 ? '-' : '+');
    const int ae = e < 0 ? -e : e;
    if (ae < 10) out.push_back('0');
    out += std::to_string(ae);
  } else if (decpt <= 0) {
    out += "0.";
    out.append(static_cast<size_t>(-decpt), '0');
    out += digits;
  } else if (decpt >= nd) {
    out += digits;
    out.append(static_cast<size_t>(decpt - nd), '0');
    out += ".0";
  } else {
    out.append(digits, 0, static_cast<size_t>(decpt));
    out.push_back('.');
    out.append(digits, static_cast<size_t>(decpt), std::string::npos);
  }
}

/// Appends json.dumps(v, ensure_ascii=False) for any nlohmann JSON value (ordered or not; a plain nlohmann::json
/// sorts its keys, so pass ordered_json when the order must be the caller's).
template <class Json>
void py_json_append(std::string& out, const Json& v) {
  using t = nlohmann::json::value_t;
  switch (v.type()) {
    case t::null: out += "null"; break;
    case t::boolean: out += v.template get<bool>() ? "true" : "false"; break;
    case t::number_integer: out += std::to_string(v.template get<int64_t>()); break;
    case t::number_unsigned: out += std::to_string(v.template get<uint64_t>()); break;
    case t::number_float: py_float_repr(out, v.template get<double>()); break;
    case t::string: py_json_append_string(out, v.template get_ref<const std::string&>()); break;
    case t::array: {
      out.push_back('[');
      bool first = true;
      for (const auto& e : v) {
        if (!first) out += ", ";
        first = false;
        py_json_append(out, e);
      }
      out.push_back(']');
      break;
    }
    case t::object: {
      out.push_back('{');
      bool first = true;
      for (auto it = v.begin(); it != v.end(); ++it) {
        if (!first) out += ", ";
        first = false;
        py_json_append_string(out, it.key());
        out += ": ";
        py_json_append(out, it.value());
      }
      out.push_back('}');
      break;
    }
    default: out += "null"; break;  // binary / discarded: not produced by the JSON parser
  }
}

template <class Json>
std::string py_json_dumps(const Json& v) {
  std::string out;
  py_json_append(out, v);
  return out;
}

/// json.dumps of a string.
inline std::string py_json_quote(std::string_view s) {
  std::string out;
  py_json_append_string(out, s);
  return out;
}

}  // namespace cmfx::text
