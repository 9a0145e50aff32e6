"""Prefix attachment, self-study targets and cartridge training on a tiny random Llama."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from qualify.cartridge.attach import document_kv, hidden_states_with_prefix
from qualify.cartridge.eval_loss import answer_token_nll
from qualify.cartridge.selfstudy import EncodedTurn, TeacherTargets, passages, split_sentences
from qualify.cartridge.train import TrainConfig, distill_loss, init_from_document, train_cartridge

VOCAB = 50


@pytest.fixture
def tiny(gen):
    torch.manual_seed(int(torch.randint(0, 2**31 - 1, (), generator=gen)))
    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
    )
    return LlamaForCausalLM(config).eval()


def test_prefix_kv_reproduces_the_full_forward(tiny, gen):
    ids = torch.randint(0, VOCAB, (2, 30), generator=gen)
    split = int(torch.randint(1, 29, (), generator=gen))
    with torch.no_grad():
        full = tiny.model(input_ids=ids[:1]).last_hidden_state
        k, v = document_kv(tiny, ids[0, :split])
        part = hidden_states_with_prefix(tiny, ids[:1, split:], k, v)
    assert k[0].shape == (split, 2, 8)
    torch.testing.assert_close(part, full[:, split:], atol=1e-5, rtol=1e-4)


def test_right_padding_does_not_change_real_positions(tiny, gen):
    ids = torch.randint(0, VOCAB, (2, 12), generator=gen)
    k, v = document_kv(tiny, torch.randint(0, VOCAB, (5,), generator=gen))
    mask = torch.ones(2, 12, dtype=torch.long)
    mask[1, 7:] = 0
    with torch.no_grad():
        batched = hidden_states_with_prefix(tiny, ids, k, v, attention_mask=mask)
        alone = hidden_states_with_prefix(tiny, ids[1:, :7], k, v)
    torch.testing.assert_close(batched[1, :7], alone[0], atol=1e-5, rtol=1e-4)


def test_answer_nll_matches_a_direct_cross_entropy(tiny, gen):
    ids = torch.randint(0, VOCAB, (9,), generator=gen).tolist()
    mask = [0] * 5 + [1] * 4
    with torch.no_grad():
        logits = tiny(torch.tensor([ids])).logits[0]
    expected = torch.nn.functional.cross_entropy(logits[4:8], torch.tensor(ids[5:]))
    assert answer_token_nll(tiny, [ids], [mask]) == pytest.approx(float(expected), rel=1e-5)


def _targets(model, doc_k, doc_v, gen, n: int) -> list[TeacherTargets]:
    out = []
    for _ in range(n):
        length = int(torch.randint(6, 14, (), generator=gen))
        ids = torch.randint(0, VOCAB, (length,), generator=gen).tolist()
        mask = [0] * 3 + [1] * (length - 3)
        positions = torch.nonzero(torch.tensor(mask[1:])).squeeze(1)
        with torch.no_grad():
            hidden = hidden_states_with_prefix(model, torch.tensor([ids]), doc_k, doc_v)[0, positions]
            top = torch.log_softmax(model.lm_head(hidden), -1).topk(8, dim=-1)
        out.append(TeacherTargets(EncodedTurn(ids, mask), positions, top.indices, top.values))
    return out


def test_training_moves_the_student_towards_the_teacher_and_keeps_the_sink(tiny, gen):
    doc = torch.randint(0, VOCAB, (64,), generator=gen)
    doc_k, doc_v = document_kv(tiny, doc)
    data = _targets(tiny, doc_k, doc_v, gen, 8)
    init = init_from_document(doc_k, doc_v, num_tokens=16, frozen_tokens=1, source="mem://init")
    with torch.no_grad():
        before = float(distill_loss(tiny, init.keys, init.values, data))
        # The full document is the teacher itself: zero KL is what the student is pulled towards.
        assert float(distill_loss(tiny, doc_k, doc_v, data)) == pytest.approx(0.0, abs=1e-4)
    result = train_cartridge(tiny, init, data, TrainConfig(steps=40, lr=3e-2, seed=0, batch_size=4))
    trained = result.cartridge
    with torch.no_grad():
        after = float(distill_loss(tiny, trained.keys, trained.values, data))
    assert after < 0.7 * before
    assert trained.num_tokens == 16 and trained.frozen_tokens == 1
    for k0, k1 in zip(init.keys, trained.keys, strict=True):
        assert torch.equal(k0[:1], k1[:1])  # the attention sink is frozen
        assert not torch.equal(k0[1:], k1[1:])
    assert not any(p.requires_grad for p in tiny.parameters())


def test_training_is_reproducible_from_its_seed(tiny, gen):
    doc_k, doc_v = document_kv(tiny, torch.randint(0, VOCAB, (32,), generator=gen))
    data = _targets(tiny, doc_k, doc_v, gen, 5)
    init = init_from_document(doc_k, doc_v, num_tokens=16, frozen_tokens=1, source="mem://init")
    runs = [train_cartridge(tiny, init, data, TrainConfig(steps=6, lr=1e-2, seed=s, batch_size=2)) for s in (3, 3, 4)]
    assert runs[0].losses == runs[1].losses
    assert runs[0].losses != runs[2].losses
    assert all(torch.equal(a, b) for a, b in zip(runs[0].cartridge.keys, runs[1].cartridge.keys, strict=True))


def test_init_longer_than_document_is_refused(tiny, gen):
    doc_k, doc_v = document_kv(tiny, torch.randint(0, VOCAB, (8,), generator=gen))
    with pytest.raises(ValueError, match="fewer than 16"):
        init_from_document(doc_k, doc_v, 16, 1, "x")


def test_passages_cover_the_document_in_order(gen):
    words = ["alpha", "beta", "gamma", "delta", "epsilon"]
    paragraphs = []
    for _ in range(3):
        sentences = []
        for _ in range(int(torch.randint(1, 6, (), generator=gen))):
            n = int(torch.randint(3, 30, (), generator=gen))
            body = " ".join(words[int(i)] for i in torch.randint(0, 5, (n,), generator=gen))
            sentences.append(body.capitalize() + ".")
        paragraphs.append(" ".join(sentences))
    document = "\n\n".join(paragraphs)
    chunks = passages(document, max_words=45)
    assert " ".join(chunks).split() == document.split()
    assert all(len(c.split()) <= 45 or len(split_sentences(c)) == 1 for c in chunks)
