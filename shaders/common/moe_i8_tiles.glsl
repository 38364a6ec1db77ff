// The tiles of gathered int8 activations that moe_i8_gather.comp writes and moe_i8_tc.comp reads: per 16 pairs and
// 32-column block kb, 16 × 8 packed int8 words at word I8T_VALUE_WORDS·kb of the tile, then every pair's block scales from
// I8T_SCALE_WORD(B) (B blocks); a tile is I8T_BLOCK_WORDS·B words (the host's define: kernels::moe_i8_tile_block_words).
#ifndef I8T_BLOCK_WORDS
#error "I8T_BLOCK_WORDS comes from the host"
#endif
#define I8T_VALUE_WORDS 128u  // a block's packed int8 words: 16 pairs × 32 bytes
#define I8T_SCALE_WORD(B) (I8T_VALUE_WORDS * (B))
