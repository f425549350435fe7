"""matrix_csv.py: attention matrices as CSV (rows = queries, columns = keys, token labels), written atomically."""

from __future__ import annotations

import csv

import pytest

from transformer_min.cli.common import csv_dir as output_dir
from transformer_min.core.errors import ConfigError
from transformer_min.core.matrix_csv import Matrix, write_matrices, write_matrix_csv


def test_round_trip_through_the_csv_module_with_awkward_labels(tmp_path):
    m = Matrix([[0.25, 0.75], [1.0, 0.0], [0.5, 0.5]], rows=["a,b", 'say "hi"', "▁Mann"], cols=["x", ","])
    path = write_matrix_csv(tmp_path / "m.csv", m)
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["query \\ key", "x", ","]
    assert [r[0] for r in rows[1:]] == ["a,b", 'say "hi"', "▁Mann"]
    assert [[float(v) for v in r[1:]] for r in rows[1:]] == m.values
    assert [p.name for p in tmp_path.iterdir()] == ["m.csv"]  # the temp file was renamed, nothing else left


def test_labels_must_fit(tmp_path):
    with pytest.raises(ValueError, match="labels"):
        write_matrix_csv(tmp_path / "bad.csv", Matrix([[1.0, 0.0]], rows=["a"], cols=["x"]))
    assert not list(tmp_path.iterdir())


def test_default_labels_and_names(tmp_path):
    paths = write_matrices(tmp_path, "decoder", {"self_attn_head0": Matrix.of([[1.0, 0.0], [0.4, 0.6]])})
    assert [p.name for p in paths] == ["decoder_self_attn_head0.csv"]
    assert paths[0].read_text(encoding="utf-8").splitlines()[:2] == ["query \\ key,pos0,pos1",
                                                                      "pos0,1.000000,0.000000"]


def test_output_dir(tmp_path):
    assert output_dir(tmp_path / "new" / "dir").is_dir()
    (tmp_path / "file").write_text("x", encoding="utf-8")
    with pytest.raises(ConfigError, match="is a file, not a folder; fix"):
        output_dir(tmp_path / "file")
