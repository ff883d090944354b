"""A state, a log of later batches over it, and the current state they make, written out by hand.

Used by the pure resolution (`silver.state.to_current_state`) and by the `current_aspect_state` SQL view.
"""

from __future__ import annotations

from conf.tables import table_spec

URN = "urn:li:dataset:(urn:li:dataPlatform:hive,db.orders,PROD)"


def _rows(spark, table_key, rows):
    """A DataFrame of `table_key`'s columns from (aspect, version, entity_deleted, batch, extra columns) tuples."""
    spec = table_spec(table_key)
    records = []
    for aspect, version, entity_deleted, batch_id, extra in rows:
        record = dict.fromkeys(spec.column_names)
        record.update(
            entity_urn=URN,
            entity_type="dataset",
            aspect_name=aspect,
            version=version,
            order_key=None if version is None else f"v{version:019d}.0",
            entity_deleted=entity_deleted,
            batch_id=batch_id,
            **extra,
        )
        records.append(tuple(record[c] for c in spec.column_names))
    return spark.createDataFrame(records, ", ".join(f"{n} {t}" for n, t in spec.column_types))


def _logged(seq, flag=False):
    return {"flag_only": flag, "log_seq": seq}


def logged_state(spark):
    """(silver.aspect_state rows, silver.aspect_state_log rows, the expected current state's key columns)."""
    state_df = _rows(
        spark,
        "silver.aspect_state",
        [
            ("newerTwice", 1, False, "b0", {}),
            ("flagged", 5, False, "b0", {}),
            ("flagThenNewer", 4, False, "b0", {}),
            ("newerThenFlag", 4, False, "b0", {}),
            ("untouched", 9, True, "b0", {}),
            # A fold cut short: the state already holds the copy of the key's logged winner.
            ("foldCutShort", 7, False, "b2", {}),
        ],
    )
    log_df = _rows(
        spark,
        "silver.aspect_state_log",
        [
            ("newerTwice", 2, False, "b1", _logged(1)),
            ("newerTwice", 3, False, "b2", _logged(2)),
            ("flagged", None, True, "b1", _logged(1, flag=True)),
            ("flagThenNewer", None, True, "b1", _logged(1, flag=True)),
            ("flagThenNewer", 5, False, "b2", _logged(2)),
            ("newerThenFlag", 5, False, "b1", _logged(1)),
            ("newerThenFlag", None, True, "b2", _logged(2, flag=True)),
            ("onlyLogged", 1, False, "b2", _logged(2)),
            ("flagWithoutRow", None, True, "b1", _logged(1, flag=True)),
            ("foldCutShort", None, True, "b1", _logged(1, flag=True)),
            ("foldCutShort", 7, False, "b2", _logged(2)),
        ],
    )
    expected_df = spark.createDataFrame(
        [
            ("newerTwice", 3, False, "b2"),
            ("flagged", 5, True, "b0"),
            ("flagThenNewer", 5, False, "b2"),
            ("newerThenFlag", 5, True, "b1"),
            ("untouched", 9, True, "b0"),
            ("onlyLogged", 1, False, "b2"),
            ("foldCutShort", 7, False, "b2"),
        ],
        "aspect_name string, version bigint, entity_deleted boolean, batch_id string",
    )
    return state_df, log_df, expected_df
