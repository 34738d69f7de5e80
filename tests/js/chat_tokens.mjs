// One chat through the official `openai` npm client, non-streamed and streamed, greedy: prints the
// reply texts and usages as JSON for the caller to compare with `ferry run --chat`.
// Usage: node chat_tokens.mjs BASE_URL MESSAGES_JSON MAX_TOKENS
import OpenAI from "openai";

const [baseURL, messagesJson, maxTokens] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey: "none", maxRetries: 0, timeout: 60000 });
const params = { model: "m", messages: JSON.parse(messagesJson), max_tokens: Number(maxTokens), temperature: 0 };
const plain = await client.chat.completions.create(params);
const stream = await client.chat.completions.create({ ...params, stream: true, stream_options: { include_usage: true } });
let streamed = "", usage = null, finish = null;
for await (const chunk of stream) {
  if (chunk.usage) usage = chunk.usage;
  if (!chunk.choices.length) continue;
  streamed += chunk.choices[0].delta.content ?? "";
  if (chunk.choices[0].finish_reason) finish = chunk.choices[0].finish_reason;
}
console.log(JSON.stringify({
  plain: { content: plain.choices[0].message.content, usage: plain.usage, finish: plain.choices[0].finish_reason },
  stream: { content: streamed, usage, finish },
}));
