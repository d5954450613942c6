package com.alibaba.fastjson2.annotation;

import java.lang.annotation.ElementType;
import java.lang.annotation.Retention;
import java.lang.annotation.RetentionPolicy;
import java.lang.annotation.Target;

/**
 * Stand-in (dledgerctl tests, tests/support/javarocketmq5broker.py): fastjson2 is neither in the
 * mirrors nor in Debian. The elements RocketMQ 5.3.3's common and auth modules give it; RocketMQ
 * writes its config and remoting JSON with fastjson 1.2.83 (built from the mirror), which does not
 * read this annotation.
 */
@Retention(RetentionPolicy.RUNTIME)
@Target({ElementType.METHOD, ElementType.FIELD, ElementType.PARAMETER, ElementType.TYPE})
public @interface JSONField {
    boolean value() default false;

    String name() default "";

    boolean serialize() default true;

    boolean deserialize() default true;
}
