"""The code a server's page offers to copy: one `curl` command and one `openai` Python snippet per
endpoint the checkpoint answers, with the server's address, the model's id and the key filled in.
OpenAI's own endpoints (completions, chat, embeddings) use the client's methods; the encoder tasks,
which take Hugging Face's inference body ({"inputs", "parameters"}), go through the client's
`post` for endpoints it has no method for."""
from __future__ import annotations

import json

from webapp.serving import endpoints as ep

# endpoint -> (title, the JSON body without "model", the openai client's call or None for client.post)
EXAMPLES = {
    ep.COMPLETIONS: ("Complete a prompt", {"prompt": "The meaning of life is", "max_tokens": 32},
                     'client.completions.create(model={model}, prompt="The meaning of life is", max_tokens=32)',
                     "print(reply.choices[0].text)"),
    ep.CHAT: ("Chat", {"messages": [{"role": "user", "content": "Say hello in one sentence."}], "max_tokens": 64},
              'client.chat.completions.create(model={model}, '
              'messages=[{{"role": "user", "content": "Say hello in one sentence."}}], max_tokens=64)',
              "print(reply.choices[0].message.content)"),
    ep.EMBEDDINGS: ("Embed texts", {"input": ["The cat sat on the mat.", "A dog ran in the park."]},
                    'client.embeddings.create(model={model}, input=["The cat sat on the mat.", '
                    '"A dog ran in the park."])',
                    "print(len(reply.data[0].embedding))"),
    ep.FILL_MASK: ("Fill in a [MASK]", {"inputs": "The capital of France is [MASK].", "parameters": {"top_k": 5}},
                   None, None),
    ep.CLASSIFY: ("Classify a text", {"inputs": "What a wonderful day it was."}, None, None),
    ep.TAG: ("Tag the words of a text", {"inputs": "Ada Lovelace was born in London."}, None, None),
    ep.ANSWER: ("Answer a question from a context",
                {"inputs": {"question": "Where was Ada born?", "context": "Ada Lovelace was born in London in 1815."}},
                None, None),
}


def _shell_quote(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"


def curl(base_url: str, key: str, endpoint: str, body: dict) -> str:
    path = endpoint.removeprefix("/v1")
    return (f"curl {base_url}{path} \\\n"
            f"  -H {_shell_quote('Authorization: Bearer ' + key)} \\\n"
            f"  -H 'Content-Type: application/json' \\\n"
            f"  -d {_shell_quote(json.dumps(body))}")


def python(base_url: str, key: str, model: str, endpoint: str, body: dict, call: str | None,
           show: str | None) -> str:
    head = f"from openai import OpenAI\n\nclient = OpenAI(base_url={base_url!r}, api_key={key!r})\n"
    if call is not None:
        return head + f"reply = {call.format(model=repr(model))}\n{show}"
    path = endpoint.removeprefix("/v1")
    return (f"import httpx\n{head}"
            f"# {endpoint} is not one of OpenAI's own endpoints: the client posts it as it is\n"
            f"reply = client.post({path!r}, cast_to=httpx.Response, body={ {'model': model, **body}!r})\n"
            "print(reply.json())")


def snippets(*, base_url: str, key: str, model: str, endpoints: list[str]) -> list[dict]:
    """[{"endpoint", "title", "curl", "python"}] for each endpoint with an example, in `endpoints`' order;
    first, the list of models, which every server answers."""
    out = [{"endpoint": ep.MODELS, "title": "List the model",
            "curl": f"curl {base_url}/models \\\n  -H {_shell_quote('Authorization: Bearer ' + key)}",
            "python": (f"from openai import OpenAI\n\nclient = OpenAI(base_url={base_url!r}, api_key={key!r})\n"
                       "print([m.id for m in client.models.list()])")}]
    for endpoint in endpoints:
        if endpoint not in EXAMPLES:
            continue
        title, body, call, show = EXAMPLES[endpoint]
        out.append({"endpoint": endpoint, "title": title,
                    "curl": curl(base_url, key, endpoint, {"model": model, **body}),
                    "python": python(base_url, key, model, endpoint, body, call, show)})
    return out
