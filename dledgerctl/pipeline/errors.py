"""Errors of the Spark pipeline. The command line turns them into one ``Error: ...`` line."""


class PipelineError(Exception):
    """Base of the pipeline's own errors."""


class PipelineUsageError(PipelineError, ValueError):
    """The job cannot run as asked (no replicas to compare, an output that exists, ...)."""


class SparkStartError(PipelineError):
    """Spark (its JVM) could not be started: no Java, a Java that is too old, a bad master."""


class JobError(PipelineError):
    """A Spark job failed; the message is the first line that says why."""
