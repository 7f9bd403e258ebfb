import os, signal
fd = os.pidfd_open(os.getpid())
os.close(fd)
assert hasattr(signal, "pidfd_send_signal"), "no signal.pidfd_send_signal"
print("pidfd ok")