"""What a user of the model server gets (`python -m trainer serve`), beside transformers in-process.

    .venv/bin/python bench/serve.py                              # gpt-mini 1/4/16 streaming clients, bert-mini embeddings
    .venv/bin/python bench/serve.py --clients 1,4,16 --requests 8 --max-tokens 64 --out serve.json
    .venv/bin/python bench/serve.py --quick                      # tiny models, few requests: the plumbing

Builds everything it needs in a temporary folder, with no network: the demo corpus (the docstrings
of this Python's standard library, trainer.prep.demo), a byte-level BPE and a WordPiece tokenizer
trained on it (--vocab, 8,000 asked; the corpus may give fewer), a gpt-mini and a bert-mini with
random weights saved as checkpoints (models_lib.checkpoint.save_model + the tokenizer files, as a
run saves them) and exported to transformers folders (trainer.export.export_checkpoint), then
starts the real server process for each (`python -m trainer serve CKPT --port 0 --ready-file F`),
with the environment it was given: torch's default threads, as a user would run it.

Generation (gpt-mini; the end-of-text token's embedding row is zeroed, so with the tied output
layer its logit is 0 and greedy replies run to max_tokens; the tokens each reply really got are
counted from the stream's usage chunk all the same). For each --clients level, that many clients
at once, each sending --requests streaming /v1/completions one after another (prompts of
--prompt-tokens tokens cut from the corpus, --max-tokens new tokens, temperature 0), over
asyncio + httpx, one keep-alive connection per client:

  - tokens/s: every reply's completion tokens over the level's wall time (first request sent to
    last reply ended);
  - time to first token: request sent to the first chunk with text (median and p95);
  - latency: request sent to [DONE] (median and p95).

Beside it, in this process and while the servers idle, at batch 1 on the same prompts and new
tokens: transformers' GPT2LMHeadModel.generate on the exported weights (greedy, use_cache=True,
min_new_tokens = max_new_tokens so it never stops early) and our own models_lib.core.generation
.generate on the same checkpoint the server loads. Each is timed on a worker thread (as the
server's engine runs the model) before and after the server's levels, and on the main thread (as a
script calls it) before them, and the fastest run is the figure (the machine is shared: the peer
gets the benefit of the doubt). On a loaded 2-core machine torch's 2 OpenMP threads make small
ops on the main thread several times slower than on a worker thread, hence both. Both must
write the same greedy tokens.

Embeddings (bert-mini, mean pooling, the server's default): /v1/embeddings with one text per
request, one client after another and --embed-clients clients at once, and with 32 texts per
request; beside it transformers' pipeline("feature-extraction", model=BertModel, tokenizer=...)
on the exported weights at batch 1 and batch 32 (return_tensors=True, then the same masked
mean and normalisation, in the timed region), on a worker thread and on the main thread, the
faster counted. The first text's vector must agree.

Ratios: the largest level's tokens/s over one client's; one client's over transformers' generate
(and over our in-process generate); server batch 32 embeddings/s over the pipeline's at batch 32
(and batch 1 over batch 1). Then the issue's goals, met or not, a table, and with --out the
figures as JSON. The machine (cores, torch threads, the 1-minute load average before and after
each part) is printed too: the benchmark shares the cores with the server it measures.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from anywhere in the repo
PY = sys.executable
START_TIMEOUT_S = 180  # a bound on the server's start, not a figure: a loaded machine imports torch slowly

# The goals (figures to compare against, not thresholds of a test).
GOAL_SCALING = 2.0       # tokens/s at the most clients over one client's
GOAL_TTFT_P95_S = 1.0    # p95 time to first token at the most clients
GOAL_VS_HF_GENERATE = 1.0
GOAL_VS_PIPELINE = 1.2

SIZES = {
    # name: (GPT preset, its overrides, BERT preset, its overrides)
    "full": ("gpt-mini", {}, "bert-mini", {}),
    "quick": ("gpt-tiny", dict(num_layers=2, hidden_size=64, num_heads=2, max_position_embeddings=128),
              "bert-tiny", dict(num_layers=2, hidden_size=64, num_heads=2, intermediate_size=128,
                                max_position_embeddings=128)),
}


def loadavg() -> float:
    return round(os.getloadavg()[0], 2)


def percentile(values: list[float], q: float) -> float:
    """The nearest-rank q-quantile (q in 0..1); nan when there are no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, int(round(q * (len(ordered) - 1)))))]


def say(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)


# ---------------------------------------------------------------------------- what is served
def build(work: Path, size: str, vocab: int) -> dict[str, Any]:
    """The corpus, both tokenizers, both checkpoints and their transformers exports, under `work`."""
    import torch

    from models_lib.checkpoint import save_model
    from models_lib.families.bert import BertConfig, BertForPreTraining
    from models_lib.families.gpt import GPTConfig, GPTLMHeadModel
    from trainer.export import export_checkpoint
    from trainer.prep.demo import write_demo_corpus
    from trainer.prep.tokenization import load_tokenizer, train_tokenizer

    corpus = work / "corpus"
    corpus.mkdir(parents=True, exist_ok=True)
    text = write_demo_corpus(work / "demo.txt").read_text(encoding="utf-8")
    (corpus / "train.txt").write_text(text, encoding="utf-8")
    (corpus / "valid.txt").write_text(text[:50_000], encoding="utf-8")
    paragraphs = [line.strip() for line in text.splitlines() if len(line.split()) >= 8]
    gpt_preset, gpt_over, bert_preset, bert_over = SIZES[size]
    out: dict[str, Any] = {"paragraphs": paragraphs, "corpus_bytes": len(text.encode("utf-8"))}
    for name, algorithm in (("gpt", "bpe"), ("bert", "wordpiece")):
        tok_dir = work / f"tokenizer-{name}"
        train_tokenizer(corpus, tok_dir, algorithm=algorithm, vocab_size=vocab)
        tok = load_tokenizer(tok_dir)
        torch.manual_seed(0)
        if name == "gpt":
            cfg = GPTConfig.from_preset(gpt_preset, **{**gpt_over, "vocab_size": tok.vocab_size, "hidden_dropout": 0.0,
                                                       "attention_dropout": 0.0, "embedding_dropout": 0.0,
                                                       "pad_token_id": tok.pad_id, "eos_token_id": tok.sep_id})
            model = GPTLMHeadModel(cfg).eval()
            with torch.no_grad():  # end-of-text's (tied) row at 0: its logit 0, so greedy replies run to max_tokens
                model.embeddings.word.weight[tok.sep_id].zero_()
        else:
            cfg = BertConfig.from_preset(bert_preset, **{**bert_over, "vocab_size": tok.vocab_size})
            model = BertForPreTraining(cfg).eval()
        ckpt = work / f"{name}-checkpoint"
        save_model(model, ckpt)
        for f in ("tokenizer.json", "tokenizer_meta.json"):
            shutil.copy(tok_dir / f, ckpt / f)
        hf_dir = work / f"{name}-hf"
        export_checkpoint(ckpt, hf_dir)
        out[name] = {"checkpoint": ckpt, "hf": hf_dir, "preset": gpt_preset if name == "gpt" else bert_preset,
                     "vocab": tok.vocab_size, "algorithm": algorithm,
                     "parameters": sum(p.numel() for p in model.parameters()),
                     "layers": cfg.num_layers, "hidden": cfg.hidden_size}
    return out


def gpt_prompts(loaded: Any, paragraphs: list[str], n: int, prompt_tokens: int, max_new: int) -> list[Any]:
    """n prompts of about `prompt_tokens` tokens (a paragraph's first tokens, as text), made ready by the
    server's own trainer.inference.generate.prepare, so the in-process peers get the server's ids."""
    from trainer.inference import generate

    tok = loaded.tokenizer.tok
    prompts = []
    for p in paragraphs:
        ids = tok.encode(p, add_special_tokens=False).ids
        if len(ids) < prompt_tokens:
            continue
        text = tok.decode(ids[:prompt_tokens]).strip()
        prompts.append((text, generate.prepare(loaded, text, max_new)))
        if len(prompts) == n:
            break
    return prompts


def embedding_texts(paragraphs: list[str], n: int, words: int) -> list[str]:
    """n texts: the corpus's paragraphs, cut to at most `words` words."""
    return [" ".join(p.split()[:words]) for p in paragraphs[:n]]


# ---------------------------------------------------------------------------- the server process
@contextmanager
def server(checkpoint: Path, work: Path, tag: str, extra: tuple[str, ...] = ()) -> Iterator[dict]:
    """`python -m trainer serve CHECKPOINT --port 0` with this environment (torch's default threads);
    yields its ready file's JSON once it listens; stopped with SIGTERM after."""
    ready = work / f"ready-{tag}.json"
    log = work / f"server-{tag}.log"
    args = [PY, "-m", "trainer", "serve", str(checkpoint), "--port", "0", "--ready-file", str(ready), *extra]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("LMWB_SERVE_API_KEYS", None)
    with log.open("w") as f:  # a file, not a pipe nobody reads
        proc = subprocess.Popen(args, cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT)
    info = {"proc": proc, "log": log, "ready": ready}
    try:
        yield info
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def wait_ready(info: dict) -> dict:
    deadline = time.monotonic() + START_TIMEOUT_S
    while not info["ready"].is_file():
        if info["proc"].poll() is not None:
            raise SystemExit(f"The server exited with {info['proc'].returncode}:\n{info['log'].read_text()[-3000:]}")
        if time.monotonic() > deadline:
            raise SystemExit(f"The server did not start in {START_TIMEOUT_S} s:\n{info['log'].read_text()[-3000:]}")
        time.sleep(0.05)
    info.update(json.loads(info["ready"].read_text()))
    return info


# ---------------------------------------------------------------------------- generation clients
async def one_completion(client: Any, url: str, model: str, prompt: str, max_tokens: int) -> dict:
    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    started = time.perf_counter()
    first = None
    tokens = 0
    finish = None
    async with client.stream("POST", f"{url}/completions", json=body) as response:
        if response.status_code != 200:
            raise RuntimeError(f"/v1/completions answered {response.status_code}: {(await response.aread())[:300]!r}")
        async for line in response.aiter_lines():
            if not line.startswith("data: "):
                continue
            data = line[6:]
            if data == "[DONE]":
                break
            chunk = json.loads(data)
            if "error" in chunk:
                raise RuntimeError(f"the stream failed: {chunk['error']}")
            for c in chunk.get("choices") or ():
                if c.get("text") and first is None:
                    first = time.perf_counter()
                finish = c.get("finish_reason") or finish
            if chunk.get("usage"):
                tokens = int(chunk["usage"]["completion_tokens"])
    ended = time.perf_counter()
    return {"ttft": (first if first is not None else ended) - started, "latency": ended - started, "tokens": tokens,
            "finish": finish}


async def generation_level(url: str, model: str, prompts: list[str], clients: int, requests: int,
                           max_tokens: int) -> dict:
    import httpx

    async def client_run(k: int, out: list[dict]) -> None:
        async with httpx.AsyncClient(timeout=httpx.Timeout(300.0)) as client:
            for r in range(requests):
                prompt = prompts[(k * requests + r) % len(prompts)]
                out.append(await one_completion(client, url, model, prompt, max_tokens))

    results: list[dict] = []
    load_before = loadavg()
    started = time.perf_counter()
    await asyncio.gather(*(client_run(k, results) for k in range(clients)))
    seconds = time.perf_counter() - started
    tokens = sum(r["tokens"] for r in results)
    ttft, latency = [r["ttft"] for r in results], [r["latency"] for r in results]
    return {"clients": clients, "requests": len(results), "tokens": tokens, "seconds": seconds,
            "tokens_per_s": tokens / seconds, "ttft_p50_s": percentile(ttft, 0.5), "ttft_p95_s": percentile(ttft, 0.95),
            "latency_p50_s": percentile(latency, 0.5), "latency_p95_s": percentile(latency, 0.95),
            "short_replies": sum(r["tokens"] < max_tokens for r in results),
            "mean_tokens_per_reply": tokens / max(1, len(results)), "load_before": load_before,
            "load_after": loadavg()}


def warm_up_generation(url: str, model: str, prompt: str) -> None:
    import httpx

    async def go() -> None:
        async with httpx.AsyncClient(timeout=httpx.Timeout(300.0)) as client:
            await one_completion(client, url, model, prompt, 4)

    asyncio.run(go())


# ---------------------------------------------------------------------------- generation in-process
def on_worker(fn: Any, *args: Any) -> Any:
    """fn(*args) on a thread of its own, as the server's engine and batcher run the model."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn(*args)
        except BaseException as e:  # noqa: BLE001 (raised again on the caller's thread)
            box["error"] = e

    thread = threading.Thread(target=run, name="bench-peer")
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


def time_generate(fn: Any, prompts: list[Any], max_new: int) -> dict:
    """fn(ids (1, S)) -> new token ids; one warm-up call, then every prompt once."""
    import torch

    fn(torch.tensor([prompts[0][1].input_ids]))
    tokens, started = 0, time.perf_counter()
    outputs = []
    for _, p in prompts:
        new = fn(torch.tensor([p.input_ids]))
        tokens += len(new)
        outputs.append(new)
    seconds = time.perf_counter() - started
    return {"tokens": tokens, "seconds": seconds, "tokens_per_s": tokens / seconds, "outputs": outputs,
            "short_replies": sum(len(o) < max_new for o in outputs), "load": loadavg()}


def generate_peers(loaded: Any, hf_model: Any, prompts: list[Any], max_new: int, worker: bool) -> dict[str, dict]:
    import torch

    from models_lib.core.generation import generate

    def ours(ids: torch.Tensor) -> list[int]:
        out = generate(loaded.model, ids, max_new_tokens=max_new, eos_token_id=None,
                       pad_token_id=int(loaded.tokenizer.pad_id))
        return out[0, ids.shape[1]:].tolist()

    def theirs(ids: torch.Tensor) -> list[int]:
        with torch.inference_mode():
            out = hf_model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new,
                                    min_new_tokens=max_new, do_sample=False, num_beams=1, use_cache=True,
                                    pad_token_id=int(loaded.tokenizer.pad_id))
        return out[0, ids.shape[1]:].tolist()

    if worker:
        return {k: on_worker(time_generate, fn, prompts, max_new) for k, fn in (("ours", ours), ("transformers", theirs))}
    return {"ours": time_generate(ours, prompts, max_new), "transformers": time_generate(theirs, prompts, max_new)}


def load_hf_gpt(folder: Path) -> Any:
    import transformers

    transformers.logging.set_verbosity_error()  # not the load report of heads left out
    transformers.utils.logging.disable_progress_bar()
    model = transformers.GPT2LMHeadModel.from_pretrained(folder).eval()
    model.generation_config.eos_token_id = None  # no early stop: the peer writes every token asked
    return model


# ---------------------------------------------------------------------------- embeddings
async def embedding_level(url: str, model: str, texts: list[str], clients: int, per_request: int) -> dict:
    import httpx

    batches = [texts[i:i + per_request] for i in range(0, len(texts), per_request)]
    vectors: dict[int, list] = {}

    async def client_run(k: int) -> None:
        async with httpx.AsyncClient(timeout=httpx.Timeout(300.0)) as client:
            for b in range(k, len(batches), clients):
                r = await client.post(f"{url}/embeddings", json={"model": model, "input": batches[b]})
                if r.status_code != 200:
                    raise RuntimeError(f"/v1/embeddings answered {r.status_code}: {r.text[:300]}")
                vectors[b] = [d["embedding"] for d in r.json()["data"]]

    load_before = loadavg()
    started = time.perf_counter()
    await asyncio.gather(*(client_run(k) for k in range(clients)))
    seconds = time.perf_counter() - started
    return {"clients": clients, "texts_per_request": per_request, "requests": len(batches), "texts": len(texts),
            "seconds": seconds, "embeddings_per_s": len(texts) / seconds, "first_vector": vectors[0][0],
            "load_before": load_before, "load_after": loadavg()}


def pipeline_embeddings(pipe: Any, texts: list[str], batch: int) -> dict:
    """transformers' feature-extraction pipeline, then the server's pooling (masked mean, unit length)."""
    import torch

    lengths = [len(ids) for ids in pipe.tokenizer(texts, truncation=True)["input_ids"]]

    def run(chunk: list[str]) -> list[torch.Tensor]:
        outs = pipe(chunk, batch_size=batch, return_tensors=True, tokenize_kwargs={"truncation": True})
        # each (1, T, H), T the batch's longest (padded on the right): a text's own rows, averaged
        return [torch.nn.functional.normalize(o[0, :n].float().mean(0), dim=-1) for o, n in zip(outs, lengths)]

    run(texts[:batch])  # warm-up
    started = time.perf_counter()
    vectors = run(texts)
    seconds = time.perf_counter() - started
    return {"batch": batch, "texts": len(texts), "seconds": seconds, "embeddings_per_s": len(texts) / seconds,
            "first_vector": vectors[0].tolist(), "load": loadavg()}


def load_pipeline(folder: Path) -> Any:
    import transformers

    transformers.logging.set_verbosity_error()  # not the report of the pre-training heads BertModel leaves out
    transformers.utils.logging.disable_progress_bar()
    model = transformers.BertModel.from_pretrained(folder).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    return transformers.pipeline("feature-extraction", model=model, tokenizer=tokenizer, device="cpu")


def max_difference(a: list[float], b: list[float]) -> float:
    return max(abs(x - y) for x, y in zip(a, b)) if a and len(a) == len(b) else float("inf")


# ---------------------------------------------------------------------------- report
def machine() -> dict[str, Any]:
    import torch
    import transformers

    return {"nproc": os.cpu_count(), "affinity": len(os.sched_getaffinity(0)), "torch_threads": torch.get_num_threads(),
            "omp_num_threads": os.environ.get("OMP_NUM_THREADS"), "torch": torch.__version__,
            "transformers": transformers.__version__, "python": platform.python_version(),
            "cpu": platform.processor() or platform.machine(), "load_start": loadavg()}


def goal(ok: bool) -> str:
    return "met" if ok else "NOT met"


def print_table(report: dict) -> None:
    g, e = report["generation"], report["embeddings"]
    rows = [("what", "figure")]
    for lv in g["levels"]:
        rows.append((f"gpt {lv['clients']:>2} client(s): tokens/s", f"{lv['tokens_per_s']:,.1f}"))
        rows.append((f"gpt {lv['clients']:>2} client(s): TTFT p50 / p95 ms",
                     f"{lv['ttft_p50_s'] * 1000:,.0f} / {lv['ttft_p95_s'] * 1000:,.0f}"))
        rows.append((f"gpt {lv['clients']:>2} client(s): latency p50 / p95 ms",
                     f"{lv['latency_p50_s'] * 1000:,.0f} / {lv['latency_p95_s'] * 1000:,.0f}"))
    rows.append((f"transformers generate (cache, batch 1; {g['transformers']['best_run']}) tokens/s",
                 f"{g['transformers']['tokens_per_s']:,.1f}"))
    rows.append((f"our generate (in-process, batch 1; {g['ours']['best_run']}) tokens/s",
                 f"{g['ours']['tokens_per_s']:,.1f}"))
    for k, v in g["ratios"].items():
        rows.append((k, f"{v:.2f}"))
    for lv in e["server"]:
        rows.append((f"bert server batch {lv['texts_per_request']:>2}, {lv['clients']} client(s): embeddings/s",
                     f"{lv['embeddings_per_s']:,.1f}"))
    for lv in e["pipeline"]:
        rows.append((f"transformers pipeline batch {lv['batch']:>2} ({lv['best_run']}): embeddings/s",
                     f"{lv['embeddings_per_s']:,.1f}"))
    for k, v in e["ratios"].items():
        rows.append((k, f"{v:.2f}"))
    width = max(len(r[0]) for r in rows)
    print()
    for i, (a, b) in enumerate(rows):
        print(f"{a:<{width}}  {b:>14}")
        if i == 0:
            print("-" * (width + 16))


def parse_clients(text: str) -> list[int]:
    try:
        levels = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"--clients takes whole numbers separated by commas, not {text!r}") from None
    if not levels or levels[0] < 1:
        raise argparse.ArgumentTypeError("--clients needs at least one level of 1 or more")
    return levels


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="tiny models and few requests (the smoke test)")
    parser.add_argument("--clients", type=parse_clients, default=None, help="concurrent streaming clients per level "
                        "(default 1,4,16; --quick 1,4)")
    parser.add_argument("--requests", type=int, default=None, help="requests each client sends one after another "
                        "(default 8; --quick 2)")
    parser.add_argument("--max-tokens", type=int, default=None, help="new tokens per reply (default 64; --quick 8)")
    parser.add_argument("--prompt-tokens", type=int, default=16, help="tokens of each prompt")
    parser.add_argument("--vocab", type=int, default=8000, help="the tokenizers' asked vocabulary")
    parser.add_argument("--embed-texts", type=int, default=None, help="texts per embedding measurement "
                        "(default 256; --quick 32); a multiple of 32")
    parser.add_argument("--embed-clients", type=int, default=8, help="concurrent clients of the batch-1 embeddings")
    parser.add_argument("--embed-words", type=int, default=32, help="each embedding text's most words")
    parser.add_argument("--max-batch", type=int, default=None, help="the server's --max-batch (default: its own, 16)")
    parser.add_argument("--out", type=Path, default=None, help="write the figures there as JSON")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder (checkpoints, server logs)")
    args = parser.parse_args(argv)
    quick = args.quick
    levels = args.clients or ([1, 4] if quick else [1, 4, 16])
    requests = args.requests or (2 if quick else 8)
    max_new = args.max_tokens or (8 if quick else 64)
    n_texts = args.embed_texts or (32 if quick else 256)
    n_texts = max(32, n_texts - n_texts % 32)

    work = Path(tempfile.mkdtemp(prefix="lmwb-bench-serve-"))
    report: dict[str, Any] = {"command": " ".join(["bench/serve.py", *(argv if argv is not None else sys.argv[1:])]),
                              "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "quick": quick}
    try:
        report["machine"] = m = machine()
        say(f"machine: {m['nproc']} CPUs (affinity {m['affinity']}), torch {m['torch']} with {m['torch_threads']} "
            f"threads (OMP_NUM_THREADS {m['omp_num_threads'] or 'unset'}; the servers get the same environment), "
            f"transformers {m['transformers']}, Python {m['python']}; 1-minute load {m['load_start']}")
        built = build(work, "quick" if quick else "full", args.vocab)
        for name in ("gpt", "bert"):
            b = built[name]
            say(f"{name}: {b['preset']}{' (quick sizes)' if quick else ''}, {b['layers']} layers, hidden {b['hidden']}, "
                f"{b['parameters'] / 1e6:.1f}M parameters, {b['algorithm']} vocabulary {b['vocab']:,} (asked "
                f"{args.vocab:,}) from {built['corpus_bytes']:,} bytes of stdlib docstrings")
        extra = ("--max-batch", str(args.max_batch)) if args.max_batch else ()
        with server(built["gpt"]["checkpoint"], work, "gpt", extra) as gpt_srv, \
                server(built["bert"]["checkpoint"], work, "bert", extra) as bert_srv:
            # while both servers start: the in-process models (not timed)
            from trainer.inference.loading import load

            loaded = load(built["gpt"]["checkpoint"])
            hf_gpt = load_hf_gpt(built["gpt"]["hf"])
            pipe = load_pipeline(built["bert"]["hf"])
            prompts = gpt_prompts(loaded, built["paragraphs"], max(8, requests * max(levels)), args.prompt_tokens,
                                  max_new)
            texts = embedding_texts(built["paragraphs"], n_texts, args.embed_words)
            wait_ready(gpt_srv)
            wait_ready(bert_srv)
            say(f"servers ready: {gpt_srv['url']} ({gpt_srv['model']}), {bert_srv['url']} ({bert_srv['model']}); "
                f"load {loadavg()}")
            report["generation"] = run_generation(gpt_srv, loaded, hf_gpt, prompts, levels, requests, max_new,
                                                  3 if quick else 8)
            report["embeddings"] = run_embeddings(bert_srv, pipe, texts, loaded_bert_tokens(built, texts),
                                                  args.embed_clients)
        report["machine"]["load_end"] = loadavg()
        report["goals"] = goals(report)
        report["models"] = {k: {f: (str(v) if isinstance(v, Path) else v) for f, v in built[k].items()}
                            for k in ("gpt", "bert")}
        print_table(report)
        print(f"\nmachine: {m['nproc']} CPUs, torch threads {m['torch_threads']} (in here and in the servers), "
              f"1-minute load {m['load_start']} at the start, {report['machine']['load_end']} at the end")
        for text in report["goals"]["lines"]:
            print(text)
        if args.out is not None:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(report, indent=2, default=str) + "\n", encoding="utf-8")
            print(f"figures written to {args.out}")
    finally:
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 0


def loaded_bert_tokens(built: dict, texts: list[str]) -> float:
    """The texts' mean token count with [CLS] and [SEP] (for the record)."""
    from trainer.prep.tokenization import load_tokenizer

    tok = load_tokenizer(built["bert"]["checkpoint"]).tok
    return sum(len(tok.encode(t).ids) for t in texts) / len(texts)


def best_peer(runs: dict[str, dict], key: str) -> dict:
    """The fastest of a peer's runs (the machine is shared: the peer gets the benefit of the doubt)."""
    where, best = max(runs.items(), key=lambda kv: kv[1][key])
    return {key: best[key], "best_run": where, "runs": {k: round(v[key], 2) for k, v in runs.items()},
            "loads": {k: v["load"] for k, v in runs.items()},
            **{f: best[f] for f in ("tokens", "short_replies", "batch", "texts") if f in best}}


def run_generation(srv: dict, loaded: Any, hf_gpt: Any, prompts: list[Any], levels: list[int], requests: int,
                   max_new: int, n_peer: int) -> dict:
    url, model = srv["url"], srv["model"]
    texts = [t for t, _ in prompts]
    peer_prompts, main_prompts = prompts[:n_peer], prompts[:max(1, n_peer // 2)]
    prompt_len = sum(len(p.input_ids) for _, p in prompts) / len(prompts)
    say(f"generation: prompts of {prompt_len:.1f} tokens on average, {max_new} new tokens, greedy; in-process peers "
        f"at batch 1 on {len(peer_prompts)} prompts on a worker thread (as the server's engine runs) and "
        f"{len(main_prompts)} on the main thread (load {loadavg()})")
    runs: dict[str, dict[str, dict]] = {}

    def peers(when: str, worker: bool) -> None:
        where = f"{'worker' if worker else 'main'} thread, {when}"
        runs[where] = generate_peers(loaded, hf_gpt, peer_prompts if worker else main_prompts, max_new, worker)
        say(f"  {where}: transformers generate {runs[where]['transformers']['tokens_per_s']:,.1f} tokens/s, "
            f"ours {runs[where]['ours']['tokens_per_s']:,.1f} tokens/s (load {runs[where]['ours']['load']})")

    peers("before", True)
    first = runs["worker thread, before"]
    same = [a == b for a, b in zip(first["ours"]["outputs"], first["transformers"]["outputs"])]
    say(f"  same greedy tokens, ours and transformers': {sum(same)} of {len(same)} prompts")
    peers("before", False)
    warm_up_generation(url, model, texts[0])
    out_levels = []
    for n in levels:
        lv = asyncio.run(generation_level(url, model, texts, n, requests, max_new))
        out_levels.append(lv)
        say(f"  server, {n:>2} streaming client(s) x {requests} requests: {lv['tokens_per_s']:,.1f} tokens/s, "
            f"TTFT p50 {lv['ttft_p50_s'] * 1000:,.0f} ms p95 {lv['ttft_p95_s'] * 1000:,.0f} ms, latency p50 "
            f"{lv['latency_p50_s'] * 1000:,.0f} ms p95 {lv['latency_p95_s'] * 1000:,.0f} ms, "
            f"{lv['mean_tokens_per_reply']:.1f} tokens a reply ({lv['short_replies']} short), load "
            f"{lv['load_before']} -> {lv['load_after']}")
    peers("after", True)
    best = {k: best_peer({w: r[k] for w, r in runs.items()}, "tokens_per_s") for k in ("transformers", "ours")}
    one = next((lv for lv in out_levels if lv["clients"] == 1), out_levels[0])
    most = out_levels[-1]
    ratios = {f"server {most['clients']} clients / {one['clients']} client tokens/s":
              most["tokens_per_s"] / one["tokens_per_s"],
              f"server {one['clients']} client / transformers generate tokens/s":
              one["tokens_per_s"] / best["transformers"]["tokens_per_s"],
              f"server {one['clients']} client / our generate tokens/s": one["tokens_per_s"] / best["ours"]["tokens_per_s"],
              "our generate / transformers generate tokens/s":
              best["ours"]["tokens_per_s"] / best["transformers"]["tokens_per_s"]}
    for k, v in ratios.items():
        say(f"  {k}: {v:.2f}")
    return {"prompt_tokens_mean": prompt_len, "max_tokens": max_new, "requests_per_client": requests,
            "levels": out_levels, "transformers": best["transformers"], "ours": best["ours"],
            "same_greedy_tokens": f"{sum(same)}/{len(same)}", "ratios": ratios,
            "scaling": most["tokens_per_s"] / one["tokens_per_s"], "scaling_clients": [one["clients"], most["clients"]],
            "vs_transformers": one["tokens_per_s"] / best["transformers"]["tokens_per_s"],
            "ttft_p95_most_clients_s": most["ttft_p95_s"]}


def run_embeddings(srv: dict, pipe: Any, texts: list[str], mean_tokens: float, clients: int) -> dict:
    url, model = srv["url"], srv["model"]
    say(f"embeddings: {len(texts)} texts of {mean_tokens:.1f} tokens on average (with [CLS] and [SEP]), mean pooling; "
        f"the pipeline on a worker thread and on the main thread (load {loadavg()})")
    half, quarter = texts[:len(texts) // 2], texts[:max(1, len(texts) // 4)]
    runs: dict[int, dict[str, dict]] = {1: {}, 32: {}}
    for where, worker in (("worker thread", True), ("main thread", False)):
        for batch, chunk in ((1, half if worker else quarter), (32, texts)):
            r = on_worker(pipeline_embeddings, pipe, chunk, batch) if worker else pipeline_embeddings(pipe, chunk, batch)
            runs[batch][where] = r
            say(f"  transformers pipeline, batch {batch:>2}, {where}: {r['embeddings_per_s']:,.1f} embeddings/s "
                f"(load {r['load']})")
    asyncio.run(embedding_level(url, model, texts[:32], 1, 32))  # warm-up
    server_levels = []
    for n_clients, per_request, chunk in ((1, 1, half), (clients, 1, half), (1, 32, texts)):
        lv = asyncio.run(embedding_level(url, model, chunk, n_clients, per_request))
        server_levels.append(lv)
        say(f"  server, {per_request:>2} text(s) a request, {n_clients} client(s): {lv['embeddings_per_s']:,.1f} "
            f"embeddings/s (load {lv['load_before']} -> {lv['load_after']})")
    diff = max_difference(server_levels[0]["first_vector"], runs[1]["worker thread"]["first_vector"])
    say(f"  the first text's vector, server against pipeline: largest difference {diff:.2e}")
    pipe_b1, pipe_b32 = best_peer(runs[1], "embeddings_per_s"), best_peer(runs[32], "embeddings_per_s")
    b32 = server_levels[-1]
    ratios = {"server batch 32 / pipeline batch 32 embeddings/s": b32["embeddings_per_s"] / pipe_b32["embeddings_per_s"],
              "server batch 1 / pipeline batch 1 embeddings/s":
              server_levels[0]["embeddings_per_s"] / pipe_b1["embeddings_per_s"],
              f"server batch 1, {clients} clients / pipeline batch 1 embeddings/s":
              server_levels[1]["embeddings_per_s"] / pipe_b1["embeddings_per_s"]}
    for k, v in ratios.items():
        say(f"  {k}: {v:.2f}")
    for lv in server_levels:
        lv.pop("first_vector")
    return {"texts": len(texts), "mean_tokens": mean_tokens, "server": server_levels, "pipeline": [pipe_b1, pipe_b32],
            "vector_max_difference": diff, "ratios": ratios,
            "vs_pipeline_b32": b32["embeddings_per_s"] / pipe_b32["embeddings_per_s"]}


def goals(report: dict) -> dict:
    g, e = report["generation"], report["embeddings"]
    a, b = g["scaling_clients"]
    checks = {
        "scaling": g["scaling"] >= GOAL_SCALING,
        "ttft_p95": g["ttft_p95_most_clients_s"] < GOAL_TTFT_P95_S,
        "vs_transformers_generate": g["vs_transformers"] >= GOAL_VS_HF_GENERATE,
        "vs_pipeline_b32": e["vs_pipeline_b32"] >= GOAL_VS_PIPELINE,
    }
    lines = [
        f"goal: {b} clients' tokens/s at least {GOAL_SCALING:g}x {a} client's: {g['scaling']:.2f}x, "
        f"{goal(checks['scaling'])}",
        f"goal: p95 time to first token under {GOAL_TTFT_P95_S:g} s at {b} clients: "
        f"{g['ttft_p95_most_clients_s'] * 1000:,.0f} ms, {goal(checks['ttft_p95'])}",
        f"goal: single-client tokens/s at least transformers' generate with a cache: {g['vs_transformers']:.2f}x, "
        f"{goal(checks['vs_transformers_generate'])}",
        f"goal: embeddings/s at batch 32 at least {GOAL_VS_PIPELINE:g}x transformers' pipeline: "
        f"{e['vs_pipeline_b32']:.2f}x, {goal(checks['vs_pipeline_b32'])}",
    ]
    return {"met": checks, "lines": lines}


if __name__ == "__main__":
    sys.exit(main())
