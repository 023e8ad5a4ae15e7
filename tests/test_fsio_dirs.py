"""Folders made on demand by the durable writers (their entries are fsynced into the parent)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agenttalk import fsio


@pytest.mark.parametrize("durable", [True, False])
def test_make_dirs_makes_every_missing_folder_and_accepts_existing_ones(
    tmp_path: Path, durable: bool
) -> None:
    deep = tmp_path / "a" / "b" / "c"
    fsio.make_dirs(deep, durable=durable)
    assert deep.is_dir()
    fsio.make_dirs(deep, durable=durable)  # again: nothing to do, no error
    fsio.make_dirs(tmp_path / "a" / "x", durable=durable)
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["b", "x"]


def test_make_dirs_refuses_a_file_in_the_way(tmp_path: Path) -> None:
    (tmp_path / "a").write_text("not a folder")
    with pytest.raises(FileExistsError):
        fsio.make_dirs(tmp_path / "a", durable=True)
    with pytest.raises(NotADirectoryError):
        fsio.make_dirs(tmp_path / "a" / "b", durable=True)


def test_durable_writers_make_the_folders_they_need(tmp_path: Path) -> None:
    target = tmp_path / "inbox" / "plan" / "message.json"
    fsio.atomic_write_json(target, {"n": 1}, durable=True)
    copy = tmp_path / "outbox" / "plan" / "c1" / "sent" / "bob" / "message.json"
    fsio.link_or_copy(target, copy, durable=True)
    archived = fsio.move(copy, tmp_path / "archive" / "done" / "plan" / "c1.json", durable=True)
    assert fsio.read_json(archived) == {"n": 1}
    assert not copy.exists()
    assert fsio.read_json(target) == {"n": 1}
