"""Tokenizers: a character-level one for the random-init models, an adapter for a checkpoint's own.

Both expose the same small interface the harness needs:

- ``pad_id``, ``eos_id``, ``vocab_size``;
- ``encode_prompt(text) -> list[int]`` (what the model is conditioned on, incl. BOS or chat template);
- ``encode_completion(text) -> list[int]`` (the target completion, ending in EOS);
- ``decode(ids) -> str`` (a completion back to text, stopping at EOS, never raising).
"""
from __future__ import annotations

#: Characters the procedural tasks use (prompts and answers); anything else maps to nothing.
CHARS = "0123456789+-*()=,:> AC"
SPECIALS = ("<pad>", "<bos>", "<eos>")


class CharTokenizer:
    """Fixed character vocabulary: ``<pad>=0, <bos>=1, <eos>=2``, then :data:`CHARS`."""

    pad_id = 0
    bos_id = 1
    eos_id = 2

    def __init__(self) -> None:
        self.itos = list(SPECIALS) + list(CHARS)
        self.stoi = {c: i for i, c in enumerate(self.itos)}

    @property
    def vocab_size(self) -> int:
        return len(self.itos)

    def encode(self, text: str) -> list[int]:
        unknown = sorted({c for c in text if c not in self.stoi})
        if unknown:
            raise ValueError(f"text holds characters outside the vocabulary {CHARS!r}: {unknown}")
        return [self.stoi[c] for c in text]

    def encode_prompt(self, text: str) -> list[int]:
        return [self.bos_id] + self.encode(text)

    def encode_completion(self, text: str) -> list[int]:
        return self.encode(text) + [self.eos_id]

    def decode(self, ids) -> str:
        out = []
        for i in ids:
            i = int(i)
            if i == self.eos_id:
                break
            if 0 <= i < len(self.itos) and i >= len(SPECIALS):
                out.append(self.itos[i])
            # pad/bos inside a completion are malformed output: dropped, the parser judges the rest
        return "".join(out)


class HFTokenizer:
    """Adapter for a local checkpoint's tokenizer, prompting through its chat template."""

    def __init__(self, hf_tokenizer, instruction: str = "Answer with the final answer only.") -> None:
        self.tok = hf_tokenizer
        self.instruction = instruction
        eos = hf_tokenizer.eos_token_id
        if eos is None:
            raise ValueError("the checkpoint's tokenizer has no eos_token_id; the harness needs one to end completions")
        self.eos_id = int(eos)
        pad = hf_tokenizer.pad_token_id
        self.pad_id = int(pad) if pad is not None else self.eos_id

    @property
    def vocab_size(self) -> int:
        return len(self.tok)

    def encode_prompt(self, text: str) -> list[int]:
        messages = [{"role": "user", "content": f"{text}\n{self.instruction}"}]
        if getattr(self.tok, "chat_template", None):
            ids = self.tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
            if isinstance(ids, dict) or hasattr(ids, "keys"):
                ids = ids["input_ids"]
            return [int(i) for i in ids]
        return [int(i) for i in self.tok(text, add_special_tokens=True)["input_ids"]]

    def encode_completion(self, text: str) -> list[int]:
        return [int(i) for i in self.tok(text, add_special_tokens=False)["input_ids"]] + [self.eos_id]

    def decode(self, ids) -> str:
        ids = [int(i) for i in ids]
        if self.eos_id in ids:
            ids = ids[: ids.index(self.eos_id)]
        try:
            return self.tok.decode(ids, skip_special_tokens=True)
        except Exception:  # a tokenizer may reject odd ids; malformed output must still score 0, not crash
            return ""
