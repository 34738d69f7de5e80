# The server's prompt cache on a chat's second turn: ferry-server with and without --no-prompt-cache,
# turn 1 = a long user message (argv[1] x a sentence), turn 2 = its reply + "And then?"; prints turn 2's
# cached tokens, prompt pass, request time and expert reads (docs/BENCHMARKS.md "The server's prompt cache").
import json, subprocess, sys, time, urllib.request, socket, re, os
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FS = os.path.join(ROOT, "build/apps/ferry-server/ferry-server")
M = os.environ.get("MODEL", os.path.join(ROOT, "build/test-data/engine-cli/m/model"))  # made by the engine_cli tests
def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p
def post(port, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", json.dumps(body).encode(), {"Content-Type": "application/json"})
    t0 = time.time(); r = json.load(urllib.request.urlopen(req, timeout=600)); return r, time.time() - t0
def metrics(port):
    t = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
    g = lambda n: float(re.search(r"\n" + n + r" ([0-9.e+]+)", t).group(1))
    return {k: g(k) for k in ["ferry_expert_reads_total", "ferry_last_prompt_seconds", "ferry_prompt_cached_tokens_total"]}
story = "The ferry leaves the harbour at dawn and crosses the strait to the island, where the market opens early. " * int(sys.argv[1] if len(sys.argv) > 1 else 20)
res = []
for rep in range(2):
    for mode in ["cached", "uncached"]:
        port = free_port()
        args = [FS, "-m", M, "--port", str(port), "-t", "2", "--ctx", "4096", "--ssd-streaming", "--cache-experts", "4", "--stream-slots", "8", "--quiet"]
        if mode == "uncached": args.append("--no-prompt-cache")
        p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(200):
            try: urllib.request.urlopen(f"http://127.0.0.1:{port}/health"); break
            except Exception: time.sleep(0.1)
        msgs = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": story}]
        r1, t1 = post(port, {"messages": msgs, "max_tokens": 8, "temperature": 0})
        msgs += [{"role": "assistant", "content": r1["choices"][0]["message"]["content"]}, {"role": "user", "content": "And then?"}]
        m0 = metrics(port)
        r2, t2 = post(port, {"messages": msgs, "max_tokens": 8, "temperature": 0})
        m1 = metrics(port)
        p.terminate(); p.wait()
        res.append({"mode": mode, "rep": rep, "turn2_prompt_tokens": r2["usage"]["prompt_tokens"],
                    "cached_tokens": r2["usage"]["prompt_tokens_details"]["cached_tokens"],
                    "turn2_prompt_s": round(m1["ferry_last_prompt_seconds"], 3), "turn2_request_s": round(t2, 3),
                    "turn2_expert_reads": int(m1["ferry_expert_reads_total"] - m0["ferry_expert_reads_total"]),
                    "reply": r2["choices"][0]["message"]["content"][:40]})
        print(json.dumps(res[-1]), flush=True)
