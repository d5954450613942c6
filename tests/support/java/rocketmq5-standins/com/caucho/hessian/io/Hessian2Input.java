package com.caucho.hessian.io;

/** Stand-in (dledgerctl tests): Hessian is not on this class path. ReplicasInfoManager uses it
 * only for the JRaft controller's snapshots, which the DLedger controller never takes. */
public class Hessian2Input {
    public Hessian2Input(java.io.InputStream in) {
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
