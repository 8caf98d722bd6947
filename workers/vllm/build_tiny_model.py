"""Build a tiny random-weight Llama with a locally trained tokenizer, for a real vLLM on CPU.

No hub downloads are possible here, so everything (weights, tokenizer, chat template) is made
locally and seeded: the same seed gives byte-identical files and, at temperature 0, the same output.

Run with the vLLM venv's python:  .cache/vllm/venv/bin/python build_tiny_model.py --out DIR
"""

import argparse
import json
import random
from collections.abc import Iterator
from pathlib import Path

# These live only in the vLLM venv, never in the gateway's, where the project's mypy runs.
import torch  # type: ignore[import-not-found,unused-ignore]
from tokenizers import (  # type: ignore[import-not-found,unused-ignore]
    AddedToken,
    Tokenizer,
    decoders,
    models,
    pre_tokenizers,
    trainers,
)
from transformers import (  # type: ignore[import-not-found,unused-ignore]
    GenerationConfig,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerFast,
)

END_OF_TEXT, IM_START, IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
SPECIAL = [END_OF_TEXT, IM_START, IM_END]
# The hermes tool parser looks these up in the vocab and refuses to start without them. They must
# NOT be special tokens: special tokens are stripped from the detokenized text the parser reads.
TOOL_TOKENS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]

# ChatML, with tools rendered the hermes/Qwen2.5 way.
CHAT_TEMPLATE = """\
{%- if tools %}
{{- '<|im_start|>system\\n' }}
{%- if messages[0]['role'] == 'system' %}{{- messages[0]['content'] }}
{%- else %}{{- 'You are a helpful assistant.' }}{%- endif %}
{{- '\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n' }}
{{- 'You are provided with function signatures within <tools></tools> XML tags:\\n<tools>' }}
{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}
{{- '\\n</tools>\\n\\nFor each function call, return a json object with function name and ' }}
{{- 'arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n' }}
{{- '{"name": <function-name>, "arguments": <args-json-object>}\\n</tool_call><|im_end|>\\n' }}
{%- elif messages[0]['role'] == 'system' %}
{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}
{%- endif %}
{%- for message in messages %}
{%- if message['role'] == 'system' %}
{%- elif message['role'] == 'assistant' %}
{{- '<|im_start|>assistant' }}
{%- if message['content'] %}{{- '\\n' + message['content'] }}{%- endif %}
{%- for tc in message.get('tool_calls') or [] %}
{%- set f = tc['function'] if tc['function'] is defined else tc %}
{{- '\\n<tool_call>\\n{"name": "' + f['name'] + '", "arguments": ' }}
{%- if f['arguments'] is string %}{{- f['arguments'] }}{%- else %}{{- f['arguments'] | tojson }}{%- endif %}
{{- '}\\n</tool_call>' }}
{%- endfor %}
{{- '<|im_end|>\\n' }}
{%- elif message['role'] == 'tool' %}
{%- if loop.first or messages[loop.index0 - 1]['role'] != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}
{{- '\\n<tool_response>\\n' + message['content'] + '\\n</tool_response>' }}
{%- if loop.last or messages[loop.index0 + 1]['role'] != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}
{%- else %}
{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}
"""

WORD_TEXT = (
    "the a of to and in is it you that he was for on are with as his they be at one have this from "
    "or had by hot word but what some we can out other were all there when up use your how said an "
    "each she which do their time if will way about many then them write would like so these her long "
    "make thing see him two has look more day could go come did number sound no most people my over "
    "know water than call first who may down side been now find any new work part take get place made "
    "live where after back little only round man year came show every good me give our under name very "
    "weather city tool call function arguments json get_weather location unit celsius fahrenheit"
)
WORDS = WORD_TEXT.split()


def corpus(rng: random.Random, n_lines: int) -> Iterator[str]:
    for i in range(n_lines):
        words = [rng.choice(WORDS) for _ in range(rng.randint(3, 20))]
        line = " ".join(words).capitalize() + rng.choice([".", "?", "!", ","])
        if i % 7 == 0:
            line += " " + json.dumps(
                {"name": rng.choice(WORDS), "arguments": {rng.choice(WORDS): rng.randint(0, 999)}}
            )
        yield line


# The longest context vLLM will serve this model with (its derived max_model_len). RoPE has no
# position table, so a long window costs nothing until used; tests/vllm serves all of it so that a
# generation its disconnect test abandons cannot finish before the abort reaches vLLM.
MAX_POSITIONS = 131072


def build(out: Path, seed: int, vocab: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)
    out.mkdir(parents=True, exist_ok=True)

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab - len(TOOL_TOKENS),
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(random.Random(seed), 20000), trainer=trainer)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in TOOL_TOKENS])

    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=None,
        eos_token=IM_END,
        pad_token=END_OF_TEXT,
        unk_token=None,
        additional_special_tokens=[IM_START],
        model_max_length=512,
        chat_template=CHAT_TEMPLATE,
    )
    fast.save_pretrained(out)
    assert len(fast) <= vocab, (len(fast), vocab)

    im_end = fast.convert_tokens_to_ids(IM_END)
    eot = fast.convert_tokens_to_ids(END_OF_TEXT)
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,  # head_dim 32: the CPU attention backend rejects 16
        num_key_value_heads=2,
        max_position_embeddings=MAX_POSITIONS,
        bos_token_id=None,
        eos_token_id=im_end,
        pad_token_id=eot,
        tie_word_embeddings=False,
    )
    # Stored in bfloat16, the dtype it is served in (float32 weights make vLLM warn per tensor).
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(out, safe_serialization=True)
    GenerationConfig(eos_token_id=[im_end, eot], pad_token_id=eot).save_pretrained(out)

    params = sum(p.numel() for p in model.parameters())
    print(f"built {out}: {params / 1e6:.2f} M params, vocab {len(fast)}, eos {im_end}, seed {seed}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--vocab", type=int, default=2048)
    args = ap.parse_args()
    build(args.out, args.seed, args.vocab)
