"""Beyond one host: a deterministic share of the compiled items per CI runner, and one signed report from the shares.

merge    `qualify merge`: verify every shard envelope, check that they cover every compiled item exactly once with
         the same gate files, tool, seed and baseline, and build the report a single run would have written
cli      the `qualify merge` command

Which shard runs which item is `qualify.shard_plan` (the session imports it; merging imports the renderer's view).
"""
