"""Parameter sweeps: `--set path=v1,v2,...` options in, one validated Scenario per grid point
(`grid`), one row per (point, policy, workload item or job) out (`run`), as CSV, JSON Lines,
JSON or table rows (the columns, the CSV text and the table cells are `report.sweep`'s).

Contract: every point is validated before anything is computed (a `ScenarioError` whose field
names `--set`); points run in order in one process, so equal shapes reuse compiled code;
finished points stream out at once and `--resume` skips them. This package re-exports the
names its callers use.
"""

from fabricjax.report.sweep import (BOM_COLUMNS, FAILURE_METRICS, METRICS, STEP_COLUMNS,
                                    STEP_PREFIX, csv_header, csv_lines, csv_text,
                                    short_names, sweep_legend, sweep_notes, sweep_table_rows)
from fabricjax.sweeps.grid import FIELD, MAX_POINTS, Axis, Point, parse_sets, sweep_points
from fabricjax.sweeps.run import (COMPILED_LIMIT, STREAM_KIND, PointResult, SweepResult,
                                 SweepStreams, failure_figures, point_record, point_rows,
                                 read_sweep_stream, run_sweep, static_only, sweep_columns,
                                 sweep_device, sweep_dict, sweep_header, write_csv,
                                 write_json)

__all__ = ["BOM_COLUMNS", "COMPILED_LIMIT", "FAILURE_METRICS", "FIELD", "MAX_POINTS", "METRICS",
           "STEP_COLUMNS", "STEP_PREFIX", "STREAM_KIND", "Axis", "Point", "PointResult",
           "SweepResult", "SweepStreams", "csv_header", "csv_lines", "csv_text",
           "failure_figures", "parse_sets", "point_record", "point_rows", "read_sweep_stream",
           "run_sweep", "short_names", "static_only", "sweep_columns", "sweep_device",
           "sweep_dict", "sweep_header", "sweep_legend", "sweep_notes", "sweep_points",
           "sweep_table_rows", "write_csv", "write_json"]
