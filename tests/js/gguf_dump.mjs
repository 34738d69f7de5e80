// Prints a GGUF file's metadata and tensor infos as JSON, parsed by the third-party
// @huggingface/gguf package (not by ferry's reader), for tests/io/store/prepare_test.cpp.
// Usage: node gguf_dump.mjs FILE.gguf
import { gguf } from "@huggingface/gguf";
import path from "node:path";

const file = path.resolve(process.argv[2]);
const { metadata, tensorInfos } = await gguf(file, { allowLocalFile: true, computeParametersCount: false });
const plain = (v) => (typeof v === "bigint" ? Number(v) : Array.isArray(v) ? v.map(plain) : v);
const meta = {};
for (const [k, v] of Object.entries(metadata)) meta[k] = plain(v);
const tensors = tensorInfos.map((t) => ({ name: t.name, shape: t.shape.map(Number), dtype: t.dtype, offset: Number(t.offset) }));
process.stdout.write(JSON.stringify({ metadata: meta, tensors }) + "\n");
