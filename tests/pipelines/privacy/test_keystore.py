"""The local key store: owner-only, rewritten atomically, refusing a file others can read; identities per person."""

from __future__ import annotations

import os
import stat

import pytest

from conf.errors import ConfigError
from pipelines.privacy.keystore import LocalKeyStore, decrypt_identity, encrypt_identity


def test_keys_are_created_owner_only_and_survive_a_reopen(tmp_path):
    path = tmp_path / "auth" / "keys.json"
    store = LocalKeyStore(path, create=True)
    key = store.person_keys(["urn:li:corpuser:p-1"], create=True)["urn:li:corpuser:p-1"]
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    reopened = LocalKeyStore(path)
    assert reopened.person_keys(["urn:li:corpuser:p-1"]) == {"urn:li:corpuser:p-1": key} and len(key) == 32
    assert reopened.pseudonym_secret() == store.pseudonym_secret()
    assert [p.name for p in path.parent.iterdir()] == ["keys.json"]  # no partial file left behind


def test_a_destroyed_key_leaves_the_identity_unreadable_and_others_readable(tmp_path):
    store = LocalKeyStore(tmp_path / "keys.json", create=True)
    keys = store.person_keys(["p-1", "p-2"], create=True)
    sealed = {p: encrypt_identity(keys[p], p, identity)
              for p, identity in (("p-1", "urn:li:corpuser:ann"), ("p-2", "urn:li:corpuser:bob"))}  # fmt: skip
    assert store.destroy("p-1") and not store.destroy("p-1")
    reopened = LocalKeyStore(tmp_path / "keys.json").person_keys(["p-1", "p-2"])
    assert decrypt_identity(reopened["p-1"], "p-1", sealed["p-1"]) is None
    assert decrypt_identity(reopened["p-2"], "p-2", sealed["p-2"]) == "urn:li:corpuser:bob"
    # A ciphertext moved to another pseudonym does not decrypt (it is bound to its own).
    assert decrypt_identity(reopened["p-2"], "p-3", sealed["p-2"]) is None


def test_a_missing_or_readable_key_file_is_refused_naming_the_setting(tmp_path):
    with pytest.raises(ConfigError, match="privacy.key_file: .*missing.json' does not exist"):
        LocalKeyStore(tmp_path / "missing.json")
    path = tmp_path / "keys.json"
    LocalKeyStore(path, create=True)
    os.chmod(path, 0o644)
    with pytest.raises(ConfigError, match="privacy.key_file: .* must be readable by its owner only"):
        LocalKeyStore(path)


class CountingKeyStore(LocalKeyStore):
    """The local key store, counting its rewrites of the file (each still made)."""

    writes = 0

    def _write(self, document: dict, exclusive: bool = False) -> None:
        type(self).writes += 1
        super()._write(document, exclusive)


def test_a_batch_of_new_people_is_one_rewrite_and_keeps_the_keys_already_there(tmp_path):
    path = tmp_path / "keys.json"
    store = CountingKeyStore(path, create=True)
    first = store.person_keys(["p-1"], create=True)["p-1"]
    before = CountingKeyStore.writes
    keys = store.person_keys([f"p-{n}" for n in range(1, 201)], create=True)
    assert CountingKeyStore.writes == before + 1
    assert keys["p-1"] == first and len(set(keys.values())) == 200
    assert LocalKeyStore(path).person_keys(list(keys)) == keys
    store.person_keys(list(keys), create=True)
    assert CountingKeyStore.writes == before + 1  # nothing new: no rewrite
    assert store.person_keys(["p-201"]) == {"p-201": None}  # not asked to create: none made
