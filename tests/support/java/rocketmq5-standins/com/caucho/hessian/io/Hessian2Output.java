package com.caucho.hessian.io;

/** Stand-in (dledgerctl tests): Hessian is not on this class path. ReplicasInfoManager uses it
 * only for the JRaft controller's snapshots, which the DLedger controller never takes. */
public class Hessian2Output {
    public Hessian2Output(java.io.OutputStream out) {
        throw new UnsupportedOperationException("hessian is not available");
    }

    public void setSerializerFactory(SerializerFactory factory) {
    }

    public Object readObject() {
        throw new UnsupportedOperationException("hessian is not available");
    }

    public void writeObject(Object object) {
        throw new UnsupportedOperationException("hessian is not available");
    }

    public void close() {
    }
}
