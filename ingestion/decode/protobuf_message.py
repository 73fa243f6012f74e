"""Which message a Protobuf table holds (docs/protobuf.md#which-message), decided once when its schemas are resolved:

1. `value.messageName`, when set: a pin always wins;
2. the message the table records (`protobuf_schemas.TABLE_PROPERTY`, written when it was created), so a restart
   keeps it whatever the topic holds by then;
3. the file's only candidate, a top-level message that no other message of the file uses;
4. a table that exists but records none (made before tables recorded it): the file's first top-level message, as
   it was made;
5. a new table of a file that leaves it open: the message the topic's earliest records name by their message
   indexes (the one most of them name; on a tie the one met first), else, with no such record yet, the file's
   first top-level message (Confluent's default for a schema without a message name).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from ingestion.decode.protobuf_wire import split_indexes
from ingestion.decode.wire import WireFormatError
from ingestion.schema import protobuf_schemas

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Choice:
    """The message a table holds, why (the log line says it), and whether `value.messageName` pinned it."""

    name: str
    reason: str
    pinned: bool = False


def choose(newest: str, versions: Mapping[int, str], *, pinned: str = "", recorded: str = "",
           table_exists: bool = False, sample: Callable[[], Sequence[bytes]] | None = None) -> Choice:
    """The message of a table whose subject's newest version is `newest` (see the module); `sample` gives the
    values of the topic's earliest records, asked only for a new table of a file that leaves the message open."""
    if pinned:
        name = protobuf_schemas.table_message(newest, pinned)
        if recorded and recorded != name:
            log.warning("value.messageName %s pins another message than the table records (%s: %s)", name,
                        protobuf_schemas.TABLE_PROPERTY, recorded)
        return Choice(name, "value.messageName", pinned=True)
    if recorded:
        return Choice(recorded, f"recorded by the table in its property {protobuf_schemas.TABLE_PROPERTY}")
    names = protobuf_schemas.candidates(newest)
    if len(names) == 1:
        return Choice(names[0], "the file's only top-level message that no other message uses")
    default = protobuf_schemas.message_names(newest)[0]
    if table_exists:
        return Choice(default, "the file's first top-level message: the table records none, and was made with it")
    values = list(sample()) if sample is not None else []
    named = named_by(values, versions)
    if named:
        name, count = named.most_common(1)[0]
        others = sum(named.values()) - count
        return Choice(name, f"named by the message indexes of {count} of the topic's {len(values)} earliest records"
                            + (f" ({others} name other messages)" if others else ""))
    why = ("the topic has no records yet" if not values else
           f"none of the topic's {len(values)} earliest records names one of its messages")
    return Choice(default, f"the file's first top-level message (the default): the file leaves it open "
                           f"({', '.join(names)}) and {why}")


def named_by(values: Iterable[bytes], versions: Mapping[int, str]) -> Counter[str]:
    """How many values name each message by their framing (schema id and message indexes), in the order first
    met; values that are not Confluent-framed, or name no version or no message of it, are left out."""
    named: Counter[str] = Counter()
    for value in values:
        try:
            schema_id, indexes, _ = split_indexes(value)
        except WireFormatError:
            continue
        text = versions.get(schema_id, "")
        message = protobuf_schemas.by_indexes(text, indexes) if protobuf_schemas.is_document(text) else None
        if message is not None:
            named[str(message.full_name)] += 1
    return named
