"""`jbod_pipeline`: the PySpark analytics jobs of `jbod-pipeline` (protocol §6).

Layout: `inputs` reads the metadata log export and the agents' telemetry (declared schemas in
`schemas`, bad lines counted and reported with their line numbers); `replay` turns the log into
the cluster's final state as DataFrames; `disks`, `blast_radius`, `plan` and `timeline` are pure
DataFrame → DataFrame transforms (the planner itself, `planner`, is a pure per-broker function run
inside Spark); `report` renders the HTML reports; `jobs` does the I/O at the edges; `cli` is the
command. `topic-stats` reads a topic of the brokers through Spark's own Kafka source
(`kafka_source`: the connector's jars, options and errors) into `topic_stats`' tables.
`synthetic` generates clusters for tests, benchmarks and demos.
"""
