"""Benchmarking evaluators and editing models (``miescore benchmark``): MIE-Bench / MER-Bench reports, the converted
external benchmarks and the editor benchmarks; docs/folder_map.md names each module's job.
"""
