"""pandas and numpy helpers (the optional extra ``tsblob[pandas]``; nothing here is imported
by ``import tsblob`` until it is used).

``to_pandas(records)`` turns the metadata of records (a query's, ``meta=True`` or not) into
a DataFrame: ``ts`` as ``datetime64[us, UTC]``, ``entry``, ``size``, ``content_type``, then
one column per label key met (missing values are ``None``; a label named like one of the
first four columns is ``label.<key>``). ``payload_array`` reads a payload as a numpy array.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Optional, Sequence, Union

from ._errors import InvalidInput
from ._models import RecordInfo

if TYPE_CHECKING:
    import numpy.typing
    import pandas

__all__ = ["to_pandas", "payload_array", "COLUMNS"]

COLUMNS = ("ts", "entry", "size", "content_type")
"""The metadata columns of :func:`to_pandas`, before the labels."""


def _need(module: str) -> Any:
    try:
        return __import__(module)
    except ImportError as e:
        raise ImportError(f"this helper needs {module}, an optional dependency: pip install 'tsblob[pandas]' "
                          "(from the tsblob source tree: pip install './client-py[pandas]')") from e


def to_pandas(records: Iterable[RecordInfo]) -> "pandas.DataFrame":
    """A DataFrame of the records' metadata, one row per record in their order: ``ts``
    (``datetime64[us, UTC]``), ``entry`` (``None`` for a single-entry query), ``size``
    (int64), ``content_type``, then a column per label key (``None`` where a record lacks
    it). Payloads are not kept (memory stays one row per record)."""
    pd = _need("pandas")
    np = _need("numpy")
    ts: List[int] = []
    entry: List[Optional[str]] = []
    size: List[int] = []
    ctype: List[str] = []
    labels: Dict[str, List[Optional[str]]] = {}
    for n, rec in enumerate(records):
        ts.append(rec.timestamp)
        entry.append(rec.entry)
        size.append(rec.size)
        ctype.append(rec.content_type)
        for key, value in rec.labels.items():
            column = labels.get(key)
            if column is None:
                column = labels[key] = [None] * n
            column.append(value)
        for column in labels.values():
            if len(column) == n:
                column.append(None)
    data: Dict[str, Any] = {
        "ts": pd.to_datetime(np.asarray(ts, dtype="int64").astype("datetime64[us]"), utc=True),
        "entry": pd.Series(entry, dtype="object"),
        "size": np.asarray(size, dtype="int64"),
        "content_type": pd.Series(ctype, dtype="object"),
    }
    for key in sorted(labels):
        data[f"label.{key}" if key in COLUMNS else key] = pd.Series(labels[key], dtype="object")
    frame = pd.DataFrame(data)
    frame["ts"] = frame["ts"].astype("datetime64[us, UTC]")
    return frame


def payload_array(data: bytes, dtype: Any = None, shape: Union[None, int, Sequence[int]] = None) -> "numpy.typing.NDArray[Any]":
    """A payload as a numpy array: a ``.npy`` payload (``numpy.save``) as it was saved;
    anything else as raw values of ``dtype`` (default ``uint8``), reshaped to ``shape`` if
    given. The array shares the payload's memory (read-only) when it can."""
    np = _need("numpy")
    if data[:6] == b"\x93NUMPY" and dtype is None:
        import io

        arr = np.load(io.BytesIO(data), allow_pickle=False)
    else:
        dt = np.dtype("uint8" if dtype is None else dtype)
        if len(data) % dt.itemsize:
            raise InvalidInput(f"a payload of {len(data)} bytes is not a whole number of {dt} values "
                               f"({dt.itemsize} bytes each)", code="bad_request")
        arr = np.frombuffer(data, dtype=dt)
    if shape is not None:
        arr = arr.reshape(shape)
    return arr  # type: ignore[no-any-return]
