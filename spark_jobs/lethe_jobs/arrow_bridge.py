"""Arrow tables into Spark and back, types intact (decimals, dates, timestamps, structs, arrays).

Spark 3.5's own Arrow helpers refuse nested structs, and `createDataFrame` from a pyarrow table
arrives only in Spark 4, so the two directions are built from public pieces:

- into Spark: the table travels as Arrow IPC bytes in a broadcast variable and `mapInArrow`
  slices it into partitions, with a Spark schema derived from the Arrow schema (`spark_type`);
- out of Spark: `DataFrame._collect_as_arrow()`, what `toPandas()` uses on 3.5 and 4.x; it keeps
  Spark's own Arrow types (timestamps are microseconds in the session time zone).

Raw Parquet files may hold types Spark has no equivalent for; `spark_compatible` maps them first
(unsigned integers widen, nanoseconds become microseconds, dictionaries decode, ...).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

ROWS_PER_PARTITION = 50_000
_UTC = "UTC"
_SIMPLE_ARROW_TO_SPARK: dict[Any, T.DataType] = {
    pa.bool_(): T.BooleanType(),
    pa.int8(): T.ByteType(),
    pa.int16(): T.ShortType(),
    pa.int32(): T.IntegerType(),
    pa.int64(): T.LongType(),
    pa.float32(): T.FloatType(),
    pa.float64(): T.DoubleType(),
    pa.string(): T.StringType(),
    pa.binary(): T.BinaryType(),
    pa.date32(): T.DateType(),
    pa.null(): T.NullType(),
}
_WIDER_UNSIGNED: dict[Any, Any] = {
    pa.uint8(): pa.int16(),
    pa.uint16(): pa.int32(),
    pa.uint32(): pa.int64(),
    pa.uint64(): pa.decimal128(20, 0),
}


def spark_compatible(arrow_type: Any) -> Any:
    """The Arrow type Spark can hold a column of `arrow_type` as."""
    if arrow_type in _SIMPLE_ARROW_TO_SPARK and not pa.types.is_null(arrow_type):
        return arrow_type
    if arrow_type in _WIDER_UNSIGNED:
        return _WIDER_UNSIGNED[arrow_type]
    for check, convert in _CONVERSIONS:
        if check(arrow_type):
            return convert(arrow_type)
    return _flat_compatible(arrow_type)


def _list_compatible(arrow_type: Any) -> Any:
    return pa.list_(spark_compatible(arrow_type.value_type))


def _decimal_compatible(arrow_type: Any) -> Any:
    if arrow_type.precision > 38:
        return pa.string()
    return pa.decimal128(arrow_type.precision, arrow_type.scale)


_CONVERSIONS: list[tuple[Callable[[Any], bool], Callable[[Any], Any]]] = [
    (pa.types.is_dictionary, lambda t: spark_compatible(t.value_type)),
    (pa.types.is_list, _list_compatible),
    (pa.types.is_large_list, _list_compatible),
    (pa.types.is_fixed_size_list, _list_compatible),
    (
        pa.types.is_map,
        lambda t: pa.map_(spark_compatible(t.key_type), spark_compatible(t.item_type)),
    ),
    (
        pa.types.is_struct,
        lambda t: pa.struct([pa.field(f.name, spark_compatible(f.type)) for f in t]),
    ),
    # tz-naive timestamps are taken as UTC; nanoseconds are cut to microseconds, as Spark does
    (pa.types.is_timestamp, lambda _: pa.timestamp("us", tz=_UTC)),
    (pa.types.is_decimal, _decimal_compatible),
]


def _is(kind: str, arrow_type: Any) -> bool:
    """`pa.types.is_<kind>`, False where this pyarrow release does not know the kind."""
    check = getattr(pa.types, f"is_{kind}", None)
    return bool(check(arrow_type)) if check is not None else False


def _flat_compatible(arrow_type: Any) -> Any:
    if _is("large_string", arrow_type) or _is("string_view", arrow_type):
        return pa.string()
    if any(_is(k, arrow_type) for k in ("large_binary", "binary_view", "fixed_size_binary")):
        return pa.binary()
    if _is("float16", arrow_type):
        return pa.float32()
    if _is("date64", arrow_type):
        return pa.date32()
    return pa.string()  # time of day, durations, intervals, all-null columns: as text


def spark_type(arrow_type: Any) -> T.DataType:
    """The Spark type of a column of a `spark_compatible` Arrow type."""
    t = pa.types
    if arrow_type in _SIMPLE_ARROW_TO_SPARK:
        return _SIMPLE_ARROW_TO_SPARK[arrow_type]
    if t.is_timestamp(arrow_type):
        return T.TimestampType() if arrow_type.tz else T.TimestampNTZType()
    if t.is_decimal(arrow_type):
        return T.DecimalType(arrow_type.precision, arrow_type.scale)
    if t.is_list(arrow_type):
        return T.ArrayType(spark_type(arrow_type.value_type))
    if t.is_map(arrow_type):
        return T.MapType(spark_type(arrow_type.key_type), spark_type(arrow_type.item_type))
    if t.is_struct(arrow_type):
        return T.StructType([T.StructField(f.name, spark_type(f.type)) for f in arrow_type])
    raise TypeError(f"no Spark type for Arrow type {arrow_type}")


def arrow_type(data_type: T.DataType, time_zone: str = _UTC) -> Any:
    """The Arrow type Spark uses for `data_type` (Spark's ArrowUtils.toArrowType)."""
    for arrow, spark in _SIMPLE_ARROW_TO_SPARK.items():
        if data_type == spark:
            return arrow
    if isinstance(data_type, T.TimestampType | T.TimestampNTZType):
        return pa.timestamp("us", tz=time_zone if isinstance(data_type, T.TimestampType) else None)
    if isinstance(data_type, T.DecimalType):
        return pa.decimal128(data_type.precision, data_type.scale)
    if isinstance(data_type, T.ArrayType):
        return pa.list_(pa.field("element", arrow_type(data_type.elementType, time_zone)))
    if isinstance(data_type, T.MapType):
        key, value = data_type.keyType, data_type.valueType
        return pa.map_(arrow_type(key, time_zone), arrow_type(value, time_zone))
    if isinstance(data_type, T.StructType):
        return pa.struct([arrow_field(f, time_zone) for f in data_type.fields])
    raise TypeError(f"no Arrow type for Spark type {data_type.simpleString()}")


def arrow_field(field: T.StructField, time_zone: str = _UTC) -> Any:
    return pa.field(field.name, arrow_type(field.dataType, time_zone), nullable=field.nullable)


def arrow_schema(schema: T.StructType, time_zone: str = _UTC) -> Any:
    return pa.schema([arrow_field(f, time_zone) for f in schema.fields])


def to_spark_compatible(table: Any) -> Any:
    """Cast every column of `table` to its `spark_compatible` type. Raises pyarrow's errors
    (ArrowInvalid, ArrowNotImplementedError) naming the column when a cast is impossible."""
    columns = []
    for field, column in zip(table.schema, table.columns, strict=True):
        target = spark_compatible(field.type)
        if target == field.type:
            columns.append(column)
            continue
        try:
            columns.append(column.cast(target, safe=False))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise type(exc)(f"column {field.name!r} of type {field.type}: {exc}") from exc
    return pa.table(columns, names=table.column_names)


def table_to_dataframe(
    spark: SparkSession, table: Any, rows_per_partition: int = ROWS_PER_PARTITION
) -> DataFrame:
    """A DataFrame with the rows of a `spark_compatible` Arrow table, in
    ceil(rows / rows_per_partition) partitions."""
    schema = T.StructType([T.StructField(f.name, spark_type(f.type)) for f in table.schema])
    time_zone = spark.conf.get("spark.sql.session.timeZone") or _UTC
    exact = table.cast(arrow_schema(schema, time_zone))
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, exact.schema) as writer:
        writer.write_table(exact)
    payload = spark.sparkContext.broadcast(sink.getvalue().to_pybytes())
    chunks = max(1, math.ceil(table.num_rows / rows_per_partition))

    def emit(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        whole = pa.ipc.open_stream(payload.value).read_all()
        for batch in batches:
            for chunk in batch.column(0).to_pylist():
                part = whole.slice(chunk * rows_per_partition, rows_per_partition)
                yield from part.combine_chunks().to_batches()

    return spark.range(chunks, numPartitions=chunks).mapInArrow(emit, schema)


def dataframe_to_table(df: DataFrame) -> Any:
    """Collect `df` to the driver as an Arrow table (Spark's Arrow types, row order kept)."""
    batches = df._collect_as_arrow()  # the Arrow collect toPandas() uses
    if batches:
        return pa.Table.from_batches(batches)
    time_zone = df.sparkSession.conf.get("spark.sql.session.timeZone") or _UTC
    return arrow_schema(df.schema, time_zone).empty_table()
