"""The `birds` kind: BirdNET: its spectrogram (`spectrogram`), network (`network`), TFLite reader
(`tflite`) and converter (`convert`), location model (`location`), recognizer, and the species
tagger and its parameters (`tagger`); its declaration is `kind.py`."""
