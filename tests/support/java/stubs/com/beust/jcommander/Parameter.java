/*
 * Stand-in for JCommander's @Parameter (not available offline), written for the dledgerctl
 * test harness: DLedgerConfig annotates its fields with it; the store never reads it.
 * Only used when no jcommander jar is found in ~/.m2.
 */
package com.beust.jcommander;

import java.lang.annotation.ElementType;
import java.lang.annotation.Retention;
import java.lang.annotation.RetentionPolicy;
import java.lang.annotation.Target;

@Retention(RetentionPolicy.RUNTIME)
@Target({ElementType.FIELD, ElementType.METHOD})
public @interface Parameter {
    String[] names() default {};

    String description() default "";

    boolean required() default false;

    int arity() default -1;

    boolean hidden() default false;
}
