// Tests of include/cmfx/io/safetensors.hpp (reader) and safetensors_writer.hpp: round trips of every dtype, sharded
// and single-file checkpoints, and one case per hostile-input rule, each checking the reported file and byte offset.
#include "support/safetensors_fixtures.hpp"

namespace {

using namespace cmfx::test::stfix;

// ---------------------------------------------------------------------------------------------------------------
// dtype table

TEST(SafetensorsDtype, NamesAndSizesRoundTrip) {
  for (const auto& e : cmfx::st_dtype_table) {
    EXPECT_EQ(cmfx::st_dtype_name(e.dtype), e.name);
    EXPECT_EQ(cmfx::st_dtype_size(e.dtype), e.size);
    ASSERT_TRUE(cmfx::st_dtype_from_name(e.name).has_value()) << e.name;
    EXPECT_EQ(*cmfx::st_dtype_from_name(e.name), e.dtype);
  }
  EXPECT_EQ(cmfx::st_dtype_size(st_dtype::F32), 4u);
  EXPECT_EQ(cmfx::st_dtype_size(st_dtype::BF16), 2u);
  EXPECT_EQ(cmfx::st_dtype_size(st_dtype::F8_E4M3), 1u);
  EXPECT_EQ(cmfx::st_dtype_size(st_dtype::F8_E8M0), 1u);
  EXPECT_EQ(cmfx::st_dtype_size(st_dtype::I64), 8u);
  EXPECT_FALSE(cmfx::st_dtype_from_name("f32").has_value());
  EXPECT_FALSE(cmfx::st_dtype_from_name("").has_value());
  EXPECT_FALSE(cmfx::st_dtype_from_name("F4").has_value());
}

// ---------------------------------------------------------------------------------------------------------------
// round trips

// Every dtype with several shapes (0-d scalar, empty, 1-d, up to 4-d), fresh random bytes each run.
TEST(Safetensors, RoundTripEveryDtypeInMemoryAndFromFile) {
  const uint64_t seed = cmfx::test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const std::vector<std::vector<uint64_t>> shapes = {{}, {0}, {1}, {7}, {2, 3}, {3, 0, 2}, {2, 1, 3, 2}};
  std::vector<st_write_entry> ts;
  for (const auto& e : cmfx::st_dtype_table)
    for (size_t i = 0; i < shapes.size(); ++i)
      ts.push_back(make_entry(std::string(e.name) + ".t" + std::to_string(i), e.dtype, shapes[i], rng));
  std::shuffle(ts.begin(), ts.end(), rng);
  const std::map<std::string, std::string> meta = {{"format", "pt"}, {"seed", std::to_string(seed)}, {"empty", ""}};
  const std::vector<uint8_t> bytes = cmfx::safetensors_bytes(ts, meta);

  // Header padded to a multiple of 8, so the data buffer is 8-aligned.
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | bytes[static_cast<size_t>(i)];
  EXPECT_EQ(n % 8, 0u);

  const safetensors_file f = safetensors_file::parse(bytes, "mem.safetensors");
  EXPECT_EQ(f.header_bytes(), n);
  EXPECT_EQ(f.metadata(), meta);
  ASSERT_EQ(f.tensors().size(), ts.size());
  // tensors() is in data order, which is the write order, and packed from 8 + N.
  uint64_t expect_off = 8 + n;
  for (size_t i = 0; i < ts.size(); ++i) {
    const st_tensor& t = f.tensors()[i];
    expect_same(t, ts[i]);
    EXPECT_EQ(t.file_offset, expect_off);
    EXPECT_EQ(t.data, bytes.data() + t.file_offset);  // zero-copy
    EXPECT_EQ(t.file, "mem.safetensors");
    expect_off += t.nbytes;
    ASSERT_EQ(f.find(ts[i].name), &t);
  }
  EXPECT_EQ(expect_off, bytes.size());
  EXPECT_EQ(f.find("nope"), nullptr);
  EXPECT_EQ(f.find(""), nullptr);

  temp_dir dir;
  const std::string path = dir.file("all.safetensors");
  cmfx::write_safetensors(path, ts, meta);
  safetensors_file g = safetensors_file::open(path);
  ASSERT_EQ(g.tensors().size(), ts.size());
  const uint8_t* first = g.tensors()[0].data;
  safetensors_file moved = std::move(g);  // the map moves with the file; data pointers stay valid
  EXPECT_EQ(moved.tensors()[0].data, first);
  for (const auto& w : ts) {
    const st_tensor* t = moved.find(w.name);
    ASSERT_NE(t, nullptr) << w.name;
    expect_same(*t, w);
    EXPECT_EQ(t->file, path);
  }
  EXPECT_EQ(moved.metadata(), meta);
}

TEST(Safetensors, NoTensorsIsValid) {
  const std::vector<uint8_t> empty = raw_file("{}");
  const safetensors_file f = safetensors_file::parse(empty, kFile);
  EXPECT_TRUE(f.tensors().empty());
  EXPECT_TRUE(f.metadata().empty());
  const std::vector<uint8_t> meta_only = raw_file("{\"__metadata__\":{\"a\":\"b\"}}   ");
  const safetensors_file g = safetensors_file::parse(meta_only, kFile);
  EXPECT_TRUE(g.tensors().empty());
  EXPECT_EQ(g.metadata().at("a"), "b");
}

// Whitespace, escapes and key order are free; zero-size tensors may share an offset (as in huggingface/safetensors).
TEST(Safetensors, AcceptsFreeFormHeaders) {
  const std::string h =
      "{ \"b\\u0041\\\"\" : { \"data_offsets\" : [ 4 , 8 ] ,\n\t\"shape\" : [ 2 ] , \"dtype\" : \"U16\" } ,"
      "\"z\":{\"shape\":[0,5],\"dtype\":\"F64\",\"data_offsets\":[0,0]},"
      "\"y\":{\"shape\":[],\"dtype\":\"I32\",\"data_offsets\":[0,4]},"
      "\"e\":{\"shape\":[0],\"dtype\":\"I8\",\"data_offsets\":[8,8]} }  \n";
  std::vector<uint8_t> data = {1, 2, 3, 4, 5, 6, 7, 8};
  const std::vector<uint8_t> file = raw_file(h, data);
  const safetensors_file f = safetensors_file::parse(file, kFile);
  ASSERT_EQ(f.tensors().size(), 4u);
  EXPECT_EQ(f.tensors()[0].name, "z");
  EXPECT_EQ(f.tensors()[1].name, "y");
  EXPECT_EQ(f.tensors()[2].name, "bA\"");
  EXPECT_EQ(f.tensors()[3].name, "e");
  EXPECT_EQ(f.find("bA\"")->data[0], 5);
  EXPECT_EQ(f.find("y")->shape.size(), 0u);
  EXPECT_EQ(f.find("y")->elements(), 1u);
}

// ---------------------------------------------------------------------------------------------------------------
// checkpoints: sharded with an index, single-file directory, single file

TEST(SafetensorsModel, ShardedDirectoryWithIndex) {
  const uint64_t seed = cmfx::test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  temp_dir dir;
  std::map<std::string, std::string> wm;
  std::vector<st_write_entry> all;
  const int kShards = 3;
  for (int s = 0; s < kShards; ++s) {
    const std::string shard = "model-0000" + std::to_string(s + 1) + "-of-0000" + std::to_string(kShards) + ".safetensors";
    std::vector<st_write_entry> ts;
    for (int i = 0; i < 4; ++i) {
      const std::string name = "layers." + std::to_string(s * 4 + i) + ".weight";
      ts.push_back(make_entry(name, i % 2 ? st_dtype::BF16 : st_dtype::F8_E4M3, {uint64_t(3 + i), 5}, rng));
      wm[name] = shard;
    }
    cmfx::write_safetensors(dir.file(shard), ts);
    all.insert(all.end(), ts.begin(), ts.end());
  }
  cmfx::write_safetensors_index(dir.str(), wm);

  uint64_t total = 0;
  for (const auto& w : all) total += w.bytes.size();
  for (const std::string& path : {dir.str(), dir.file("model.safetensors.index.json")}) {
    SCOPED_TRACE(path);
    const safetensors_model m = safetensors_model::open(path);
    ASSERT_EQ(m.shard_files().size(), size_t(kShards));
    EXPECT_EQ(fs::path(m.shard_files()[0]).filename(), "model-00001-of-00003.safetensors");
    EXPECT_EQ(fs::path(m.shard_files()[2]).filename(), "model-00003-of-00003.safetensors");
    ASSERT_EQ(m.tensors().size(), all.size());
    EXPECT_EQ(m.total_bytes(), total);
    for (const auto& w : all) {
      const st_tensor* t = m.find(w.name);
      ASSERT_NE(t, nullptr) << w.name;
      expect_same(*t, w);
      EXPECT_EQ(fs::path(t->file).filename(), wm[w.name]);
    }
    EXPECT_EQ(m.find("layers.99.weight"), nullptr);
  }
  // The index's total_size is the sum of the tensor sizes.
  std::ifstream in(dir.file("model.safetensors.index.json"));
  const nlohmann::json j = nlohmann::json::parse(in);
  EXPECT_EQ(j.at("metadata").at("total_size").get<uint64_t>(), total);
  EXPECT_EQ(j.at("weight_map").size(), wm.size());
}

TEST(SafetensorsModel, SingleFileDirectoryAndSingleFile) {
  std::mt19937_64 rng(cmfx::test::fresh_seed());
  temp_dir dir;
  std::vector<st_write_entry> ts = {make_entry("w", st_dtype::F16, {4, 4}, rng), make_entry("b", st_dtype::F32, {4}, rng)};
  cmfx::write_safetensors(dir.file("model.safetensors"), ts);
  for (const std::string& path : {dir.str(), dir.file("model.safetensors")}) {
    const safetensors_model m = safetensors_model::open(path);
    ASSERT_EQ(m.shard_files().size(), 1u);
    EXPECT_EQ(m.shard_files()[0], dir.file("model.safetensors"));
    ASSERT_EQ(m.tensors().size(), 2u);
    EXPECT_EQ(m.tensors()[0]->name, "w");
    expect_same(*m.find("b"), ts[1]);
    EXPECT_EQ(m.total_bytes(), 32u + 16u);
  }
}

TEST(SafetensorsModel, DirectoryWithoutIndexNeedsExactlyOneFile) {
  temp_dir dir;
  try {
    safetensors_model::open(dir.str());
    FAIL() << "empty directory accepted";
  } catch (const input_error& e) {
    EXPECT_THAT(e.what(), HasSubstr(dir.str()));
    EXPECT_THAT(e.what(), HasSubstr("0 .safetensors files"));
  }
  cmfx::write_safetensors(dir.file("a.safetensors"), {});
  cmfx::write_safetensors(dir.file("b.safetensors"), {});
  try {
    safetensors_model::open(dir.str());
    FAIL() << "two files accepted";
  } catch (const input_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("2 .safetensors files"));
  }
  try {
    safetensors_model::open(dir.file("nonexistent"));
    FAIL() << "missing path accepted";
  } catch (const input_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("nonexistent: offset 0: no such file"));
  }
}

// Writes `index` text into a fresh dir with shards a (x, y) and b (z); expects open() to fail at `offset` of `file`.
void expect_index_rejected(const std::string& index, const std::string& file_name, uint64_t offset,
                           const std::string& reason, const std::vector<st_write_entry>& extra_b = {}) {
  std::mt19937_64 rng(1);
  temp_dir dir;
  cmfx::write_safetensors(dir.file("a.safetensors"),
                          {make_entry("x", st_dtype::I32, {2}, rng), make_entry("y", st_dtype::I64, {1}, rng)});
  std::vector<st_write_entry> b = {make_entry("z", st_dtype::U8, {3}, rng)};
  b.insert(b.end(), extra_b.begin(), extra_b.end());
  cmfx::write_safetensors(dir.file("b.safetensors"), b);
  std::ofstream(dir.file("model.safetensors.index.json")) << index;
  try {
    safetensors_model::open(dir.str());
    ADD_FAILURE() << "index accepted: " << index;
  } catch (const input_error& e) {
    EXPECT_THAT(e.what(), HasSubstr(dir.file(file_name) + ": offset " + std::to_string(offset) + ": "));
    EXPECT_THAT(e.what(), HasSubstr(reason));
  }
}

TEST(SafetensorsModel, IndexRejections) {
  const std::string idx = "model.safetensors.index.json";
  {
    const std::string s = R"({"metadata":{"total_size":1},"weight_map":{"x":"a.safetensors","w":"b.safetensors"}})";
    SCOPED_TRACE("name missing from its shard");
    expect_index_rejected(s, idx, s.find("\"w\""), "missing from shard 'b.safetensors'");
  }
  {
    const std::string s = R"({"weight_map":{"x":"a.safetensors","z":"b.safetensors","x":"b.safetensors"}})";
    SCOPED_TRACE("duplicate weight_map key");
    expect_index_rejected(s, idx, s.rfind("\"x\""), "duplicate tensor name 'x'");
  }
  {
    const std::string s = R"({"weight_map":{"x":"../a.safetensors"}})";
    SCOPED_TRACE("path traversal");
    expect_index_rejected(s, idx, s.find("\"../"), "not a plain file name");
  }
  {
    const std::string s = R"({"weight_map":["x"]})";
    SCOPED_TRACE("weight_map not an object");
    expect_index_rejected(s, idx, s.find('['), "weight_map is an array");
  }
  {
    const std::string s = R"({"weight_map":{"x":7}})";
    SCOPED_TRACE("weight_map value not a string");
    expect_index_rejected(s, idx, s.find('7'), "expected a file name");
  }
  {
    const std::string s = R"({"metadata":{"total_size":1}})";
    SCOPED_TRACE("no weight_map");
    expect_index_rejected(s, idx, s.size() - 1, "no weight_map");
  }
  {
    const std::string s = R"({"weight_map":{"x":"a.safetensors",})";
    SCOPED_TRACE("index syntax error");
    expect_index_rejected(s, idx, s.size() - 1, "invalid JSON");
  }
  {
    const std::string s = R"({"weight_map":{"x":"c.safetensors"}})";
    SCOPED_TRACE("missing shard file");
    expect_index_rejected(s, "c.safetensors", 0, "cannot open");
  }
  {
    // x is listed for a but also stored in b: the later shard in name order (b) is reported at x's data offset.
    std::mt19937_64 rng(1);
    const auto x_in_b = make_entry("x", st_dtype::I32, {2}, rng);
    const std::vector<uint8_t> b = cmfx::safetensors_bytes(
        {make_entry("z", st_dtype::U8, {3}, rng), x_in_b});
    const uint64_t x_off = safetensors_file::parse(b, "b").find("x")->file_offset;
    const std::string s = R"({"weight_map":{"x":"a.safetensors","y":"a.safetensors","z":"b.safetensors"}})";
    SCOPED_TRACE("tensor in two shards");
    expect_index_rejected(s, "b.safetensors", x_off, "tensor 'x' also appears in shard", {x_in_b});
  }
}

}  // namespace
