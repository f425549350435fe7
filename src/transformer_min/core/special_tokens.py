"""The special token ids every vocabulary of the project shares (section 3.4: one shared vocabulary).

PAD pads a batch to its longest sequence and is masked out of attention (section 3.2.3) and of the
loss; BOS starts the output shifted right (section 3.1); EOS ends every sequence; UNK stands for a
piece the tokenizer does not know. `VocabConfig` (vocab.pad_id, bos_id, eos_id) defaults to these.
"""

from __future__ import annotations

PAD_ID = 0
BOS_ID = 1
EOS_ID = 2
UNK_ID = 3
