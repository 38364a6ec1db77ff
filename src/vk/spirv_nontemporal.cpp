// A SPIR-V rewrite: loads through storage-buffer blocks with given type names get the Nontemporal memory operand
// (SPIR-V 1.4+, MemoryAccess bit 0x4: "the data is not likely to be accessed again soon"). The weight planes of a
// decode step pass through the L2 once per token; marked, they might stop evicting what the next steps reuse (their
// code, activations, partial sums) — no effect measured on the H200 (docs/VULKAN.md "Bank conflicts in the
// indexer, a faster top-k, and what did not pay").
//
// One forward walk (SPIR-V orders definitions before uses): OpName of the block types, OpTypePointer → pointee,
// OpVariable → block type, access chains / OpCopyObject → their root variable, then every OpLoad whose root is a
// marked block gets the bit (added to an existing mask, or as a new mask word).
#include <cstring>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "internal.hpp"

namespace cmfx::gpu::detail {

namespace {
constexpr uint32_t op_name = 5, op_type_pointer = 32, op_variable = 59, op_load = 61, op_access_chain = 65,
                   op_in_bounds_access_chain = 66, op_ptr_access_chain = 67, op_copy_object = 83;
constexpr uint32_t mem_nontemporal = 0x4;
}  // namespace

size_t mark_nontemporal(std::vector<uint32_t>& spv, const std::vector<std::string>& block_names) {
  if (spv.size() < 5 || spv[0] != 0x07230203u) return 0;
  std::unordered_map<uint32_t, std::string> names;
  std::unordered_map<uint32_t, uint32_t> pointee, root;  // pointer type → pointee; pointer value → its variable
  std::unordered_set<uint32_t> marked;                   // variables of a marked block type
  const std::unordered_set<std::string> want(block_names.begin(), block_names.end());
  std::vector<uint32_t> out(spv.begin(), spv.begin() + 5);
  out.reserve(spv.size() + spv.size() / 16);
  size_t count = 0;
  for (size_t i = 5; i < spv.size();) {
    const uint32_t wc = spv[i] >> 16, op = spv[i] & 0xFFFFu;
    if (wc == 0 || i + wc > spv.size()) return 0;  // malformed: leave the caller's copy alone (nothing marked)
    const uint32_t* w = spv.data() + i;
    switch (op) {
      case op_name:
        if (wc >= 3) {
          const char* s = reinterpret_cast<const char*>(w + 2);
          names[w[1]] = std::string(s, strnlen(s, size_t(wc - 2) * 4));
        }
        break;
      case op_type_pointer:
        if (wc >= 4) pointee[w[1]] = w[3];
        break;
      case op_variable:
        if (wc >= 4) {
          root[w[2]] = w[2];
          const auto p = pointee.find(w[1]);
          if (p != pointee.end()) {
            const auto n = names.find(p->second);
            if (n != names.end() && want.count(n->second)) marked.insert(w[2]);
          }
        }
        break;
      case op_access_chain:
      case op_in_bounds_access_chain:
      case op_ptr_access_chain:
      case op_copy_object:
        if (wc >= 4) {
          const auto r = root.find(w[3]);
          if (r != root.end()) root[w[2]] = r->second;
        }
        break;
      default:
        break;
    }
    if (op == op_load && wc >= 4) {
      const auto r = root.find(w[3]);
      if (r != root.end() && marked.count(r->second)) {
        ++count;
        if (wc == 4) {  // no mask yet: one word more
          out.push_back((5u << 16) | op_load);
          out.insert(out.end(), w + 1, w + 4);
          out.push_back(mem_nontemporal);
        } else {  // Nontemporal takes no operands: the bit joins the mask, the mask's operands stay in order
          out.insert(out.end(), w, w + wc);
          out[out.size() - wc + 4] |= mem_nontemporal;
        }
        i += wc;
        continue;
      }
    }
    out.insert(out.end(), w, w + wc);
    i += wc;
  }
  spv = std::move(out);
  return count;
}

const std::vector<std::string>& nontemporal_blocks() {
  static const std::vector<std::string> b = {"W0", "W0Q", "W0D", "W0B", "W0H", "W1", "W1B", "W2", "W2B", "SRC"};
  return b;
}

}  // namespace cmfx::gpu::detail
