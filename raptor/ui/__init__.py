"""What a user sees: the results table, the progress display, the output files with their
charts and trace, named by ONNX layer."""
