package ingest;

import org.apache.spark.SparkContext;
import org.apache.spark.TaskContext;
import org.apache.spark.sql.api.java.UDF0;
import org.apache.spark.sql.expressions.UserDefinedFunction;
import org.apache.spark.sql.functions;
import org.apache.spark.sql.types.DataTypes;

/**
 * A value of the batch being written (its id, its ingestion time), read from a local property the writing
 * thread sets before it writes: Spark hands a thread's local properties to the tasks of the jobs it starts.
 *
 * <p>As a literal, a value that changes every batch would make Spark generate and compile the stage's code
 * again every batch; as a broadcast one-row table it costs a Spark job every batch. A function of no input
 * whose code is the same in every batch costs neither. It is nondeterministic, so the optimizer never folds it
 * into a literal, and not nullable: a missing property fails the task instead of writing a null.
 */
public final class BatchValue implements UDF0<Long> {

    private static final long serialVersionUID = 1L;

    private final String property;

    private BatchValue(String property) {
        this.property = property;
    }

    /** The function to register: a long read from the local property {@code property}. */
    public static UserDefinedFunction function(String property) {
        return functions.udf(new BatchValue(property), DataTypes.LongType).asNonNullable().asNondeterministic();
    }

    @Override
    public Long call() {
        TaskContext task = TaskContext.get();
        // On the driver (an optimizer evaluating a projection of local rows), the writing thread's own property.
        String value = task != null ? task.getLocalProperty(property)
                : SparkContext.getOrCreate().getLocalProperty(property);
        if (value == null) {
            throw new IllegalStateException("local property " + property + " is not set: the batch's values are "
                    + "set by the thread that writes the batch");
        }
        return Long.parseLong(value);
    }
}
