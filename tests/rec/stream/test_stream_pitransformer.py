"""PI-Transformer: an event's own label never reaches its prediction, every earlier label and
the memory do, and it fits a tiny chunk."""

import pytest
import torch
import torch.nn.functional as F

from attnsvm.rec.models.pitransformer import PITransformer, PITransformerConfig

ITEMS = 30


def model(**overrides) -> PITransformer:
    torch.manual_seed(0)
    settings = {"hidden_size": 16, "ffn_size": 16, "num_heads": 2, "max_len": 5, **overrides}
    return PITransformer(ITEMS, PITransformerConfig(**settings)).eval()


def chunk(size: int = 12, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    histories = torch.randint(1, ITEMS + 1, (size, 5), generator=generator)
    histories[:3, :3] = 0  # short histories; the first event has none at all
    histories[0] = 0
    labels = torch.randint(1, ITEMS + 1, (size,), generator=generator)
    return histories, labels


@pytest.mark.parametrize("label_table", ["tied", "separate"])
@pytest.mark.parametrize("with_memory", [False, True])
def test_changing_an_events_label_never_changes_its_own_prediction(label_table, with_memory):
    net = model(label_table=label_table, context_blocks=3)
    histories, labels = chunk()
    memory = net.stream_hidden(*chunk(seed=2))[1] if with_memory else None
    with torch.no_grad():
        before, _ = net.stream_hidden(histories, labels, memory)
        for event in range(len(labels)):
            changed = labels.clone()
            changed[event] = labels[event] % ITEMS + 1
            after, _ = net.stream_hidden(histories, changed, memory)
            # its own prediction and every earlier one: the same to the last bit
            assert torch.equal(after[: event + 1], before[: event + 1])
            if event < len(labels) - 1:  # every later one reads it
                assert (after[event + 1 :] - before[event + 1 :]).abs().amax(1).min() > 1e-6


def test_the_memory_of_the_previous_chunk_reaches_every_prediction():
    net = model()
    histories, labels = chunk()
    with torch.no_grad():
        alone, memory = net.stream_hidden(histories, labels)
        remembered, _ = net.stream_hidden(histories, labels, memory)
    assert len(memory) == net.config.context_blocks and memory[0].shape == (12, 16)
    assert (remembered - alone).abs().amax(1).min() > 1e-6


def test_bad_shapes_are_refused():
    net = model()
    histories, labels = chunk()
    with pytest.raises(ValueError, match="do not fit"):
        net.stream_hidden(histories, labels[:-1])
    with pytest.raises(ValueError, match="context_blocks"):
        PITransformerConfig(context_blocks=0)


def test_pi_transformer_overfits_a_tiny_chunk():
    net = model(dropout=0.0, attention_dropout=0.0).train()
    histories, labels = chunk(size=16)
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-2)
    for _ in range(150):
        hidden, _ = net.stream_hidden(histories, labels)
        loss = F.cross_entropy(net.logits(hidden), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    net.eval()
    with torch.no_grad():
        logits = net.logits(net.stream_hidden(histories, labels)[0])
    assert float(F.cross_entropy(logits, labels)) < 0.05
    assert torch.equal(logits.argmax(1), labels)
