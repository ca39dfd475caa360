"""Flink's metric names, in one place: what tasks report, and what readers look up.

Names and units are Flink's (its "System metrics" reference): counts are totals since the task
(attempt) started, ``...PerSecond`` figures are rates over the last report interval, times per
second are milliseconds in each second (busy + idle + back-pressured = 1000), watermarks are
epoch milliseconds (``MIN_WATERMARK`` before the first one), pool usages are fractions 0..1.
"""

from __future__ import annotations

# -- per subtask (task scope) ------------------------------------------------------------------
NUM_RECORDS_IN = "numRecordsIn"
NUM_RECORDS_OUT = "numRecordsOut"
NUM_RECORDS_IN_PER_SECOND = "numRecordsInPerSecond"
NUM_RECORDS_OUT_PER_SECOND = "numRecordsOutPerSecond"
BUSY_TIME = "busyTimeMsPerSecond"
IDLE_TIME = "idleTimeMsPerSecond"
BACK_PRESSURED_TIME = "backPressuredTimeMsPerSecond"
ACCUMULATED_BUSY = "accumulatedBusyTime"
ACCUMULATED_IDLE = "accumulatedIdleTime"
ACCUMULATED_BACK_PRESSURED = "accumulatedBackPressuredTime"
INPUT_WATERMARK = "currentInputWatermark"
OUTPUT_WATERMARK = "currentOutputWatermark"
IN_POOL_USAGE = "buffers.inPoolUsage"
OUT_POOL_USAGE = "buffers.outPoolUsage"
#: data buffers sent downstream and their bytes: records out per buffer is how full buffers
#: leave (a hash edge at parallelism p fills each of its channels p times slower)
NUM_BUFFERS_OUT = "numBuffersOut"
NUM_BYTES_OUT = "numBytesOut"
#: buffer debloating (reported while it is on): the buffer size the task announced to its
#: producers (bytes), and how long the data queued on its input channels takes to process
DEBLOATED_BUFFER_SIZE = "debloatedBufferSize"
ESTIMATED_TIME_TO_CONSUME = "estimatedTimeToConsumeBuffersMs"
#: sources that know it (FLIP-33): records still waiting in the external system, a Kafka
#: consumer's lag summed over its partitions
PENDING_RECORDS = "pendingRecords"

#: every figure a task reports, in the order readers list them
TASK_METRICS = (
    NUM_RECORDS_IN, NUM_RECORDS_OUT, NUM_RECORDS_IN_PER_SECOND, NUM_RECORDS_OUT_PER_SECOND,
    BUSY_TIME, IDLE_TIME, BACK_PRESSURED_TIME, ACCUMULATED_BUSY, ACCUMULATED_IDLE, ACCUMULATED_BACK_PRESSURED,
    INPUT_WATERMARK, OUTPUT_WATERMARK, IN_POOL_USAGE, OUT_POOL_USAGE, NUM_BUFFERS_OUT, NUM_BYTES_OUT,
    DEBLOATED_BUFFER_SIZE, ESTIMATED_TIME_TO_CONSUME, PENDING_RECORDS,
)

# -- per job (JobManager scope) -----------------------------------------------------------------
UPTIME = "uptime"
NUM_RESTARTS = "numRestarts"
LAST_CHECKPOINT_DURATION = "lastCheckpointDuration"
LAST_CHECKPOINT_SIZE = "lastCheckpointSize"
LAST_CHECKPOINT_ALIGNMENT = "lastCheckpointAlignmentDuration"
LAST_CHECKPOINT_ALIGNMENT_BUFFERED = "lastCheckpointAlignmentBuffered"
IN_PROGRESS_CHECKPOINTS = "numberOfInProgressCheckpoints"
COMPLETED_CHECKPOINTS = "numberOfCompletedCheckpoints"
FAILED_CHECKPOINTS = "numberOfFailedCheckpoints"

# -- per TaskManager (its process tree: itself, its task launcher, its tasks) ---------------------
CPU_USAGE = "Status.ProcessTree.CPU.Usage"
MEMORY_RSS = "Status.ProcessTree.Memory.RSS"
NUM_TASKS = "numRunningTasks"

#: the smallest watermark: "no watermark yet" (Flink's Long.MIN_VALUE)
MIN_WATERMARK = -(2**63)
