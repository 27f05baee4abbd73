"""Small real Caffe2 nets kept as files (see ``make_training_nets.py``)."""
