# A preload module that starts a thread: forking must be refused.
import threading
import time

threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
