// Drives ferry-server with the official `openai` npm client: models list, a chat completion, the same
// chat streamed, and a raw completion. Usage: node openai_client.mjs BASE_URL API_KEY
// Prints one JSON summary line; exits 1 with a message when a response does not parse or check out.
import OpenAI from "openai";

const [baseURL, apiKey] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 30000 });

function check(cond, what) {
  if (!cond) { console.error("check failed: " + what); process.exit(1); }
}
function checkUsage(u, what) {
  check(u && Number.isInteger(u.prompt_tokens) && u.prompt_tokens > 0, what + ": usage.prompt_tokens");
  check(Number.isInteger(u.completion_tokens) && u.completion_tokens > 0, what + ": usage.completion_tokens");
  check(u.total_tokens === u.prompt_tokens + u.completion_tokens, what + ": usage.total_tokens");
}

const models = await client.models.list();
check(models.data.length === 1 && typeof models.data[0].id === "string", "models.list gives one model");
const model = models.data[0].id;

const params = { model, messages: [{ role: "user", content: "Say hello." }], max_tokens: 10, temperature: 0 };
const chat = await client.chat.completions.create(params);
check(chat.object === "chat.completion", "chat.object");
check(chat.choices.length === 1 && chat.choices[0].message.role === "assistant", "chat message role");
check(typeof chat.choices[0].message.content === "string", "chat content is a string");
check(["stop", "length"].includes(chat.choices[0].finish_reason), "chat finish_reason");
checkUsage(chat.usage, "chat");

const stream = await client.chat.completions.create({ ...params, stream: true, stream_options: { include_usage: true } });
let streamed = "", chunks = 0, finish = null, streamUsage = null;
for await (const chunk of stream) {
  check(chunk.object === "chat.completion.chunk", "chunk.object");
  if (chunk.usage) streamUsage = chunk.usage;
  if (!chunk.choices.length) continue;
  chunks++;
  streamed += chunk.choices[0].delta.content ?? "";
  if (chunk.choices[0].finish_reason) finish = chunk.choices[0].finish_reason;
}
check(chunks >= 3, "the stream has a role chunk, content chunks and a finish chunk");
check(streamed === chat.choices[0].message.content, "streamed text equals the non-streamed text (greedy)");
check(finish === chat.choices[0].finish_reason, "stream finish_reason");
checkUsage(streamUsage, "stream");

const completion = await client.completions.create({ model, prompt: "Once upon a time", max_tokens: 6, temperature: 0 });
check(completion.object === "text_completion", "completion.object");
check(typeof completion.choices[0].text === "string", "completion text");
checkUsage(completion.usage, "completion");

let rejected = null;
try {
  await client.chat.completions.create({ ...params, n: 3 });
} catch (e) {
  rejected = e;
}
check(rejected && rejected.status === 400 && rejected.param === "n", "n=3 is rejected with 400 naming 'n'");

console.log(JSON.stringify({ model, chat: chat.choices[0].message.content, chunks, streamed,
                             completion: completion.choices[0].text, usage: chat.usage }));
