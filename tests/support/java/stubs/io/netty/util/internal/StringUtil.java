/*
 * Stand-in for netty-common's StringUtil (not available offline), written for the dledgerctl
 * test harness: DLedger's MultiPathMmapFileList calls only isNullOrEmpty. Only used when no
 * netty-common jar is found in ~/.m2.
 */
package io.netty.util.internal;

public final class StringUtil {
    private StringUtil() {
    }

    public static boolean isNullOrEmpty(String s) {
        return s == null || s.isEmpty();
    }
}
