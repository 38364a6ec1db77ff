// The official OpenAI Node SDK as the client of `cmfx serve` on the toy model (loopback only):
// non-stream, stream with the usage chunk, stop, tools, and errors surfacing as APIError with the right status.
// usage: node sdk_test.mjs CMFX TOKENIZER TMPDIR      exit 0 pass, 1 fail, 77 skip (no tokenizer, CI not "true")
import { execFileSync, spawn } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const [cmfx, tokenizer, tmp] = process.argv.slice(2);
const here = path.dirname(fileURLToPath(import.meta.url));
if (!fs.existsSync(tokenizer)) {
  const ci = (process.env.CI || "").toLowerCase() === "true";
  console.log(`sdk_test: tokenizer not found: ${tokenizer}${ci ? "; failing because CI=true" : "; skipping"}`);
  process.exit(ci ? 1 : 77);
}
execFileSync("bash", [path.join(here, "..", "..", "..", "scripts", "serve_sdk.sh")], { stdio: ["ignore", "ignore", "inherit"] });
const { default: OpenAI } = await import(path.join(here, "node_modules", "openai", "index.mjs"));

fs.mkdirSync(tmp, { recursive: true });
const model = path.join(tmp, "toy.cmf");
execFileSync(cmfx, ["make-toy", "--out", model, "--tokenizer", tokenizer], { stdio: "ignore" });

function startServer(name, flags) {
  return new Promise((resolve, reject) => {
    const p = spawn(cmfx, ["serve", model, "--port", "0", "--model-name", "toy", ...flags], { stdio: ["ignore", "ignore", "pipe"] });
    let log = "";
    const timer = setTimeout(() => { p.kill("SIGKILL"); reject(new Error(`${name} did not start: ${log}`)); }, 20000);
    p.stderr.on("data", (d) => {
      log += d.toString();
      const m = log.match(/listening on http:\/\/127\.0\.0\.1:(\d+)/);
      if (m) { clearTimeout(timer); resolve({ p, port: Number(m[1]) }); }
    });
    p.on("exit", () => { clearTimeout(timer); reject(new Error(`${name} exited: ${log}`)); });
  });
}

let pass = 0, fail = 0;
function check(name, ok, detail = "") {
  if (ok) pass++; else { fail++; console.log(`FAIL: ${name} ${detail}`); }
}
async function expectStatus(name, promise, status) {
  try { await promise; check(name, false, "(no error)"); }
  catch (e) { check(name, e instanceof OpenAI.APIError && e.status === status, `(got ${e && e.status}: ${e && e.message})`); }
}

const open = await startServer("open", []);
const keyed = await startServer("keyed", ["--api-key", "s3cret"]);
try {
  const client = new OpenAI({ baseURL: `http://127.0.0.1:${open.port}/v1`, apiKey: "unused", maxRetries: 0, timeout: 60000 });
  const base = { model: "toy", messages: [{ role: "user", content: "Hello!" }], max_tokens: 8, seed: 7, thinking: { type: "disabled" } };

  const r = await client.chat.completions.create(base);
  check("non-stream: one choice with text", r.choices.length === 1 && typeof r.choices[0].message.content === "string");
  check("non-stream: finish_reason", ["stop", "length"].includes(r.choices[0].finish_reason), r.choices[0].finish_reason);
  check("non-stream: usage", r.usage && r.usage.completion_tokens <= 8 && r.usage.prompt_tokens > 0, JSON.stringify(r.usage));

  let text = "", usage = null, chunks = 0;
  const stream = await client.chat.completions.create({ ...base, stream: true, stream_options: { include_usage: true } });
  for await (const c of stream) {
    chunks++;
    if (c.usage) usage = c;
    for (const ch of c.choices) if (ch.delta && ch.delta.content) text += ch.delta.content;
  }
  check("stream: several chunks", chunks >= 2, `${chunks}`);
  check("stream: usage chunk last with no choices", usage && usage.choices.length === 0 && usage.usage.completion_tokens === r.usage.completion_tokens);
  check("stream text == non-stream text (same seed)", text === r.choices[0].message.content, JSON.stringify([text, r.choices[0].message.content]));

  const stopAt = r.choices[0].message.content.slice(1, 2) || "a";
  const s = await client.chat.completions.create({ ...base, stop: [stopAt] });
  check("stop: text does not contain the stop string", !s.choices[0].message.content.includes(stopAt), JSON.stringify(s.choices[0].message.content));

  const tools = [{ type: "function", function: { name: "get_weather", description: "Weather of a city",
    parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } } }];
  const t = await client.chat.completions.create({ ...base, tools });
  const tc = t.choices[0].message.content || "";
  check("tools: valid response, no markup in content", !tc.includes("DSML") && !tc.includes("｜"), JSON.stringify(tc));

  const c = await client.completions.create({ model: "toy", prompt: "Once upon a time", max_tokens: 5, seed: 3 });
  check("completions: text", typeof c.choices[0].text === "string" && c.usage.completion_tokens <= 5);
  const models = await client.models.list();
  check("models: toy listed", models.data.some((m) => m.id === "toy"));

  await expectStatus("unknown model -> 404", client.chat.completions.create({ ...base, model: "nope" }), 404);
  await expectStatus("n=2 -> 400", client.chat.completions.create({ ...base, n: 2 }), 400);
  await expectStatus("temperature out of range -> 400", client.chat.completions.create({ ...base, temperature: -1 }), 400);
  const wrong = new OpenAI({ baseURL: `http://127.0.0.1:${keyed.port}/v1`, apiKey: "wrong", maxRetries: 0 });
  await expectStatus("wrong key -> 401", wrong.chat.completions.create(base), 401);
  const right = new OpenAI({ baseURL: `http://127.0.0.1:${keyed.port}/v1`, apiKey: "s3cret", maxRetries: 0 });
  const k = await right.chat.completions.create(base);
  check("right key -> 200", k.choices.length === 1);
} catch (e) {
  check("unexpected exception", false, String(e && e.stack || e));
} finally {
  for (const s of [open, keyed]) s.p.kill("SIGTERM");
}
console.log(`${pass} passed, ${fail} failed`);
process.exit(fail ? 1 : 0);
