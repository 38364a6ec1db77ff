// Hostile-input tests of the safetensors reader: one case per rule, each checking the file name and byte offset,
// plus truncation and corruption sweeps.
#include "support/safetensors_fixtures.hpp"

namespace {

using namespace cmfx::test::stfix;

// ---------------------------------------------------------------------------------------------------------------
// hostile inputs: framing

TEST(SafetensorsHostile, ShorterThanEightBytes) {
  for (size_t n = 0; n < 8; ++n)
    EXPECT_TRUE(rejects(std::vector<uint8_t>(n, 0), 0, "shorter than the 8-byte header length")) << n;
}

TEST(SafetensorsHostile, HeaderLengthOverLimit) {
  std::vector<uint8_t> f = raw_file("{}");
  const uint64_t n = 100'000'001;
  for (int i = 0; i < 8; ++i) f[static_cast<size_t>(i)] = static_cast<uint8_t>(n >> (8 * i));
  EXPECT_TRUE(rejects(f, 0, "exceeds the limit"));
  for (int i = 0; i < 8; ++i) f[static_cast<size_t>(i)] = 0xFF;
  EXPECT_TRUE(rejects(f, 0, "exceeds the limit"));
}

TEST(SafetensorsHostile, HeaderLengthPastEndOfFile) {
  std::vector<uint8_t> f = raw_file("{}    ");
  f[0] = 7;  // one byte more than present
  EXPECT_TRUE(rejects(f, 0, "runs past the end of the 14-byte file"));
}

TEST(SafetensorsHostile, EmptyHeaderOrNotStartingWithBrace) {
  EXPECT_TRUE(rejects(raw_file(""), 8, "does not start with '{'"));
  EXPECT_TRUE(rejects(raw_file(" {}"), 8, "does not start with '{'"));
  EXPECT_TRUE(rejects(raw_file("\xEF\xBB\xBF{}"), 8, "does not start with '{'"));  // BOM
}

// ---------------------------------------------------------------------------------------------------------------
// hostile inputs: JSON and UTF-8

TEST(SafetensorsHostile, TopLevelNotAnObject) {
  EXPECT_TRUE(rejects(raw_file("[]"), 8, "does not start with '{'"));
  EXPECT_TRUE(rejects(raw_file("\"x\""), 8, "does not start with '{'"));
}

TEST(SafetensorsHostile, InvalidJson) {
  {
    const std::string h = "{\"a\":}";
    EXPECT_TRUE(rejects(raw_file(h), at(h, "}"), "invalid JSON"));
  }
  {
    const std::string h = "{\"a\" 1}";
    EXPECT_TRUE(rejects(raw_file(h), at(h, "1"), "invalid JSON"));
  }
  {
    const std::string h = "{\"__metadata__\":{\"k\":\"v\"";  // cut: the error is at the end of the header
    EXPECT_TRUE(rejects(raw_file(h), 8 + h.size(), "invalid JSON"));
  }
  {
    const std::string h = "{} x";  // trailing garbage after the object
    EXPECT_TRUE(rejects(raw_file(h), at(h, "x"), "invalid JSON"));
  }
  {
    const std::string h = "{}\0\0";
    const std::string hz(h.c_str(), 4);
    EXPECT_TRUE(rejects(raw_file(hz), 10, "invalid JSON"));  // NUL padding is not whitespace
  }
  {
    const std::string h = "{\"a\":{\"dtype\":\"F32\",\"shape\":[1e999]}}";
    EXPECT_TRUE(rejects(raw_file(h), at(h, "1e999") + 4, "number overflow"));  // at the number's last byte
  }
}

TEST(SafetensorsHostile, InvalidUtf8) {
  {
    const std::string h = "{\"a\xFF\":{}}";  // in a tensor name
    EXPECT_TRUE(rejects(raw_file(h), at(h, "\xFF"), "invalid JSON"));
  }
  {
    const std::string h = "{\"__metadata__\":{\"k\":\"\xC3\x28\"}}";  // bad continuation byte in a value
    EXPECT_TRUE(rejects(raw_file(h), at(h, "\x28"), "invalid JSON"));
  }
  {
    const std::string h = "{\"a\xED\xA0\x80\":{}}";  // UTF-8 encoded surrogate
    EXPECT_TRUE(rejects(raw_file(h), at(h, "\xA0"), "invalid JSON"));
  }
  {
    const std::string h = "{\xFF}";  // outside any string
    EXPECT_TRUE(rejects(raw_file(h), at(h, "\xFF"), "invalid JSON"));
  }
}

// ---------------------------------------------------------------------------------------------------------------
// hostile inputs: schema

TEST(SafetensorsHostile, MetadataNotAnObjectOfStrings) {
  {
    const std::string h = "{\"__metadata__\":[\"a\"]}";
    EXPECT_TRUE(rejects(raw_file(h), at(h, "["), "__metadata__ is an array"));
  }
  {
    const std::string h = "{\"__metadata__\":null}";
    EXPECT_TRUE(rejects(raw_file(h), at(h, "null"), "__metadata__ is null"));
  }
  {
    const std::string h = "{\"__metadata__\":{\"a\":\"b\",\"k\":12}}";
    EXPECT_TRUE(rejects(raw_file(h), at(h, "12"), "value of 'k' is a number"));
  }
  {
    const std::string h = "{\"__metadata__\":{\"k\":{\"x\":\"y\"}}}";
    EXPECT_TRUE(rejects(raw_file(h), at(h, "{", 2), "value of 'k' is an object"));
  }
  {
    const std::string h = "{\"__metadata__\":{\"k\":true}}";
    EXPECT_TRUE(rejects(raw_file(h), at(h, "true"), "is a boolean"));
  }
  {
    const std::string h = "{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}";
    EXPECT_TRUE(rejects(raw_file(h), at(h, "\"k\"", 1), "duplicate __metadata__ key 'k'"));
  }
  {
    const std::string h = "{\"__metadata__\":{},\"__metadata__\":{}}";
    EXPECT_TRUE(rejects(raw_file(h), at(h, "\"__metadata__\"", 1), "duplicate key __metadata__"));
  }
}

TEST(SafetensorsHostile, TensorEntryNotAnObject) {
  for (const std::string v : {"[1]", "5", "\"F32\"", "null", "false", "-3", "0.5"}) {
    const std::string h = "{\"t\":" + v + "}";
    EXPECT_TRUE(rejects(raw_file(h), 13, "tensor 't': entry is")) << v;
  }
}

TEST(SafetensorsHostile, TensorEntryKeys) {
  {
    const std::string h = "{\"t\":{\"shape\":[1],\"data_offsets\":[0,1]}}";
    EXPECT_TRUE(rejects(raw_file(h, 1), at(h, "{", 1), "missing key dtype"));
  }
  {
    const std::string h = "{\"t\":{\"dtype\":\"U8\",\"data_offsets\":[0,1]}}";
    EXPECT_TRUE(rejects(raw_file(h, 1), at(h, "{", 1), "missing key shape"));
  }
  {
    const std::string h = "{\"t\":{\"dtype\":\"U8\",\"shape\":[1]}}";
    EXPECT_TRUE(rejects(raw_file(h, 1), at(h, "{", 1), "missing key data_offsets"));
  }
  {
    const std::string h = "{\"t\":{}}";
    EXPECT_TRUE(rejects(raw_file(h), at(h, "{", 1), "missing key dtype"));
  }
  {
    const std::string h = "{\"t\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1],\"extra\":1}}";
    EXPECT_TRUE(rejects(raw_file(h, 1), at(h, "\"extra\""), "unexpected key 'extra'"));
  }
  {
    const std::string h = "{\"t\":{\"dtype\":\"U8\",\"shape\":[1],\"dtype\":\"I8\",\"data_offsets\":[0,1]}}";
    EXPECT_TRUE(rejects(raw_file(h, 1), at(h, "\"dtype\"", 1), "duplicate key dtype"));
  }
  {
    const std::string h = "{\"t\":{\"dtype\":\"U8\",\"shape\":[1],\"shape\":[1],\"data_offsets\":[0,1]}}";
    EXPECT_TRUE(rejects(raw_file(h, 1), at(h, "\"shape\"", 1), "duplicate key shape"));
  }
  {
    const std::string h = "{\"t\":{\"data_offsets\":[0,1],\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}";
    EXPECT_TRUE(rejects(raw_file(h, 1), at(h, "\"data_offsets\"", 1), "duplicate key data_offsets"));
  }
}

TEST(SafetensorsHostile, Dtype) {
  for (const std::string d : {"F33", "f32", "", "F4", "float32", "F8_E4M3FN"}) {
    const std::string h = "{\"t\":{\"dtype\":\"" + d + "\",\"shape\":[1],\"data_offsets\":[0,1]}}";
    EXPECT_TRUE(rejects(raw_file(h, 1), at(h, "\"" + d + "\""), "unknown dtype '" + d + "'")) << d;
  }
  const std::string h = "{\"t\":{\"dtype\":4,\"shape\":[1],\"data_offsets\":[0,1]}}";
  EXPECT_TRUE(rejects(raw_file(h, 1), at(h, "4"), "dtype is a number"));
  const std::string h2 = "{\"t\":{\"dtype\":[\"U8\"],\"shape\":[1],\"data_offsets\":[0,1]}}";
  EXPECT_TRUE(rejects(raw_file(h2, 1), at(h2, "["), "dtype is an array"));
}

TEST(SafetensorsHostile, Shape) {
  auto file = [](const std::string& shape) {
    return "{\"t\":{\"dtype\":\"U8\",\"shape\":" + shape + ",\"data_offsets\":[0,1]}}";
  };
  {
    const std::string h = file("1");
    EXPECT_TRUE(rejects(raw_file(h, 1), at(h, "1"), "shape is a number"));
  }
  {
    const std::string h = file("{}");
    EXPECT_TRUE(rejects(raw_file(h, 1), at(h, "{", 2), "shape is an object"));
  }
  {
    const std::string h = file("[1,-1]");
    EXPECT_TRUE(rejects(raw_file(h, 1), at(h, "-1"), "shape entry is a negative number"));
  }
  {
    const std::string h = file("[1.5]");
    EXPECT_TRUE(rejects(raw_file(h, 1), at(h, "1.5"), "shape entry is a non-integer number"));
  }
  {
    const std::string h = file("[1,18446744073709551616]");  // 2^64: parsed as a float
    EXPECT_TRUE(rejects(raw_file(h, 1), at(h, "18446744073709551616"), "non-integer"));
  }
  {
    const std::string h = file("[[1]]");
    EXPECT_TRUE(rejects(raw_file(h, 1), at(h, "[[") + 1, "shape entry is an array"));
  }
  {
    const std::string h = file("[\"1\"]");
    EXPECT_TRUE(rejects(raw_file(h, 1), at(h, "\"1\""), "shape entry is a string"));
  }
  {
    const std::string h = file("[1,1,1,1,1,1,1,1,1]");  // 9 dimensions
    EXPECT_TRUE(rejects(raw_file(h, 1), at(h, "1]"), "more than 8 dimensions"));
  }
  {
    const std::string h = "{\"t\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}";
    const std::vector<uint8_t> f = raw_file(h, 1);
    EXPECT_NO_THROW(safetensors_file::parse(f, kFile));  // 8 are fine
  }
}

TEST(SafetensorsHostile, ElementCountAndByteSizeOverflow) {
  {
    const std::string h = "{\"t\":{\"dtype\":\"U8\",\"shape\":[4294967296,4294967297],\"data_offsets\":[0,0]}}";
    EXPECT_TRUE(rejects(raw_file(h), at(h, "4294967297"), "element count overflows"));
  }
  {
    // A zero dimension does not excuse an earlier overflow (checked product left to right, as safetensors).
    const std::string h = "{\"t\":{\"dtype\":\"U8\",\"shape\":[4294967296,4294967296,0],\"data_offsets\":[0,0]}}";
    EXPECT_TRUE(rejects(raw_file(h), at(h, "4294967296", 1), "element count overflows"));
  }
  {
    const std::string h = "{\"t\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904],\"data_offsets\":[0,0]}}";
    EXPECT_TRUE(rejects(raw_file(h), at(h, "["), "byte size overflows"));
  }
}

TEST(SafetensorsHostile, DataOffsetsSyntax) {
  auto file = [](const std::string& offs) {
    return "{\"t\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":" + offs + "}}";
  };
  {
    const std::string h = file("[0]");
    EXPECT_TRUE(rejects(raw_file(h, 1), 8 + h.rfind(']'), "data_offsets has 1 entries, expected 2"));
  }
  {
    const std::string h = file("[]");
    EXPECT_TRUE(rejects(raw_file(h, 1), 8 + h.rfind(']'), "data_offsets has 0 entries, expected 2"));
  }
  {
    const std::string h = file("[0,1,2]");
    EXPECT_TRUE(rejects(raw_file(h, 1), at(h, "2"), "more than two entries"));
  }
  {
    const std::string h = file("[-1,0]");
    EXPECT_TRUE(rejects(raw_file(h, 1), at(h, "-1"), "negative number"));
  }
  {
    const std::string h = file("[0,1.0]");
    EXPECT_TRUE(rejects(raw_file(h, 1), at(h, "1.0"), "non-integer"));
  }
  {
    const std::string h = file("[0,1e0]");
    EXPECT_TRUE(rejects(raw_file(h, 1), at(h, "1e0"), "non-integer"));
  }
  {
    const std::string h = file("{\"a\":0}");
    EXPECT_TRUE(rejects(raw_file(h, 1), at(h, "{", 2), "data_offsets is an object"));
  }
}

TEST(SafetensorsHostile, SizeMismatchAndReversedOffsets) {
  {
    const std::string h = "{" + ent("t", "F32", "[2]", 0, 4) + "}";
    EXPECT_TRUE(rejects(raw_file(h, 4), at(h, "[0"), "data_offsets span 4 bytes, but F32 with 2 elements needs 8"));
  }
  {
    const std::string h = "{" + ent("t", "U8", "[]", 0, 0) + "}";  // a scalar has one element
    EXPECT_TRUE(rejects(raw_file(h), at(h, "[0"), "needs 1"));
  }
  {
    const std::string h = "{" + ent("t", "U8", "[0]", 4, 0) + "}";
    EXPECT_TRUE(rejects(raw_file(h, 4), at(h, "[4"), "begin 4 > end 0"));
  }
}

// ---------------------------------------------------------------------------------------------------------------
// hostile inputs: data layout (absolute file offsets)

TEST(SafetensorsHostile, OffsetsBeyondDataBuffer) {
  const std::string h = "{" + ent("a", "U8", "[4]", 0, 4) + "," + ent("t", "F32", "[2]", 4, 12) + "}";
  EXPECT_TRUE(rejects(raw_file(h, 8), 8 + h.size() + 4, "tensor 't' data ends at 12, beyond the data buffer of 8"));
  const std::string big = "{" + ent("t", "U8", "[18446744073709551615]", 0, 18446744073709551615ull) + "}";
  EXPECT_TRUE(rejects(raw_file(big, 16), 8 + big.size(), "beyond the data buffer"));
}

TEST(SafetensorsHostile, OverlappingTensors) {
  const std::string h = "{" + ent("a", "U8", "[8]", 0, 8) + "," + ent("b", "U8", "[8]", 4, 12) + "}";
  EXPECT_TRUE(rejects(raw_file(h, 12), 8 + h.size() + 4, "tensor 'b' overlaps tensor 'a'"));
  // Same begin: the shorter sorts first and the longer overlaps it.
  const std::string h2 = "{" + ent("a", "U8", "[8]", 0, 8) + "," + ent("b", "U8", "[4]", 0, 4) + "}";
  EXPECT_TRUE(rejects(raw_file(h2, 8), 8 + h2.size(), "tensor 'a' overlaps tensor 'b'"));
  // A zero-size tensor inside another one's data.
  const std::string h3 = "{" + ent("a", "U8", "[8]", 0, 8) + "," + ent("e", "U8", "[0]", 3, 3) + "}";
  EXPECT_TRUE(rejects(raw_file(h3, 8), 8 + h3.size() + 3, "tensor 'e' overlaps tensor 'a'"));
}

TEST(SafetensorsHostile, HolesBetweenTensors) {
  const std::string h = "{" + ent("a", "U8", "[4]", 0, 4) + "," + ent("b", "U8", "[4]", 8, 12) + "}";
  EXPECT_TRUE(rejects(raw_file(h, 12), 8 + h.size() + 8, "tensor 'b' leaves a gap of 4 bytes"));
  // The first tensor must start at 0.
  const std::string h2 = "{" + ent("a", "U8", "[4]", 4, 8) + "}";
  EXPECT_TRUE(rejects(raw_file(h2, 8), 8 + h2.size() + 4, "tensor 'a' leaves a gap of 4 bytes"));
  // Huge offsets saturate instead of wrapping.
  const std::string h3 = "{" + ent("a", "U8", "[0]", 18446744073709551615ull, 18446744073709551615ull) + "}";
  EXPECT_TRUE(rejects(raw_file(h3), 18446744073709551615ull, "gap"));
}

TEST(SafetensorsHostile, BufferLongerThanTensors) {
  const std::string h = "{" + ent("a", "U8", "[4]", 0, 4) + "}";
  EXPECT_TRUE(rejects(raw_file(h, 6), 8 + h.size() + 4, "data buffer has 2 bytes after the last tensor"));
  EXPECT_TRUE(rejects(raw_file("{}", 3), 8 + 2, "data buffer has 3 bytes after the last tensor"));
}

// ---------------------------------------------------------------------------------------------------------------
// hostile inputs: names

TEST(SafetensorsHostile, DuplicateTensorNames) {
  const std::string h = "{" + ent("a", "U8", "[4]", 0, 4) + "," + ent("a", "U8", "[4]", 4, 8) + "}";
  EXPECT_TRUE(rejects(raw_file(h, 8), at(h, "\"a\"", 1), "duplicate tensor name 'a'"));
  // Escapes are decoded before comparing: "\u0061" is "a". The offset is the opening quote of the second key.
  const std::string h2 = "{" + ent("a", "U8", "[4]", 0, 4) + "," + ent("\\u0061", "U8", "[4]", 4, 8) + "}";
  EXPECT_TRUE(rejects(raw_file(h2, 8), at(h2, "\"\\u0061\""), "duplicate tensor name 'a'"));
  // Names ending in an escaped backslash or quote still get the right start offset.
  const std::string h3 = "{" + ent("x\\\\", "U8", "[4]", 0, 4) + "," + ent("x\\\\", "U8", "[4]", 4, 8) + "}";
  EXPECT_TRUE(rejects(raw_file(h3, 8), at(h3, "\"x\\\\\"", 1), "duplicate tensor name 'x\\x5c'"));
  const std::string h4 = "{" + ent("q\\\"", "U8", "[4]", 0, 4) + "," + ent("q\\\"", "U8", "[4]", 4, 8) + "}";
  EXPECT_TRUE(rejects(raw_file(h4, 8), at(h4, "\"q\\\"\"", 1), "duplicate tensor name"));
}

TEST(SafetensorsHostile, EmptyTensorName) {
  std::string h = "{";  // built with += : g++ 12 gives a false -Wrestrict for "x" + std::string (GCC PR 105651)
  h += ent("", "U8", "[4]", 0, 4);
  h += "}";
  EXPECT_TRUE(rejects(raw_file(h, 4), at(h, "\"\""), "empty tensor name"));
}

TEST(SafetensorsHostile, LongNamesAreShortenedInMessages) {
  const std::string name(5000, 'n');
  const std::string h = "{" + ent(name, "U8", "[4]", 0, 4) + "," + ent(name, "U8", "[4]", 4, 8) + "}";
  try {
    const std::vector<uint8_t> f = raw_file(h, 8);
    safetensors_file::parse(f, kFile);
    FAIL();
  } catch (const input_error& e) {
    EXPECT_LT(std::string(e.what()).size(), 200u);
    EXPECT_THAT(e.what(), HasSubstr("..."));
  }
}

// ---------------------------------------------------------------------------------------------------------------
// sweeps: every truncation and many single-byte corruptions of a small valid file

TEST(SafetensorsHostile, TruncatedAtEveryLength) {
  std::mt19937_64 rng(cmfx::test::fresh_seed());
  const std::vector<uint8_t> f = small_valid_file(rng);
  ASSERT_NO_THROW(safetensors_file::parse(f, kFile));
  for (size_t len = 0; len < f.size(); ++len) {
    const std::vector<uint8_t> cut(f.begin(), f.begin() + static_cast<std::ptrdiff_t>(len));
    try {
      safetensors_file::parse(cut, kFile);
      ADD_FAILURE() << "accepted a " << len << "-byte prefix";
    } catch (const input_error& e) {
      EXPECT_EQ(e.file(), kFile);
      EXPECT_LE(e.offset(), f.size()) << len;
    }
  }
}

// Each byte replaced by a few values: the parser either accepts a consistent file or throws input_error.
TEST(SafetensorsHostile, SingleByteCorruptionsNeverCrash) {
  const uint64_t seed = cmfx::test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const std::vector<uint8_t> f = small_valid_file(rng);
  for (size_t i = 0; i < f.size(); ++i) {
    for (uint8_t v : {uint8_t(0x00), uint8_t(0xFF), uint8_t('"'), uint8_t('}'), uint8_t('9'), static_cast<uint8_t>(rng())}) {
      std::vector<uint8_t> g = f;
      g[i] = v;
      try {
        const safetensors_file p = safetensors_file::parse(g, kFile);
        uint64_t sum = 0;
        for (const auto& t : p.tensors()) {
          ASSERT_GE(t.data, g.data());
          ASSERT_LE(t.data + t.nbytes, g.data() + g.size());
          sum += t.nbytes;
        }
        EXPECT_EQ(8 + p.header_bytes() + sum, g.size());
      } catch (const input_error& e) {
        EXPECT_EQ(e.file(), kFile);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------------------------
// writer

TEST(SafetensorsWriter, RejectsBadEntries) {
  std::mt19937_64 rng(3);
  EXPECT_THROW(cmfx::safetensors_bytes({st_write_entry{"t", st_dtype::F32, {2}, std::vector<uint8_t>(7)}}),
               cmfx::usage_error);
  EXPECT_THROW(cmfx::safetensors_bytes({make_entry("", st_dtype::U8, {1}, rng)}), cmfx::usage_error);
  EXPECT_THROW(cmfx::safetensors_bytes({make_entry("__metadata__", st_dtype::U8, {1}, rng)}), cmfx::usage_error);
  EXPECT_THROW(cmfx::safetensors_bytes({make_entry("a", st_dtype::U8, {1}, rng), make_entry("a", st_dtype::U8, {1}, rng)}),
               cmfx::usage_error);
  EXPECT_THROW(cmfx::safetensors_bytes({make_entry("\xFF", st_dtype::U8, {1}, rng)}), cmfx::usage_error);
}

TEST(SafetensorsWriter, HeaderIsCompactAndSpacePadded) {
  std::mt19937_64 rng(4);
  const std::vector<uint8_t> b = cmfx::safetensors_bytes({make_entry("w", st_dtype::F16, {3}, rng)});
  const std::string h(b.begin() + 8, b.end() - 6);
  EXPECT_EQ(h.size() % 8, 0u);
  EXPECT_EQ(h.substr(0, h.find_last_not_of(' ') + 1), R"({"w":{"dtype":"F16","shape":[3],"data_offsets":[0,6]}})");
}

}  // namespace
