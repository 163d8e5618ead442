"""Telling other systems what live streams heard: detections over MQTT (`mqtt`).

`arengine/http/listen.py` opens a `StreamNotice` per live stream (`MqttNotifier.stream`); the
engine tells it when a label's run starts (`LabelTagger.on_open`) and the endpoint when a tag is
final. Nothing here ever makes recognition wait: messages go to a bounded queue that one thread
hands to the broker.

May import: arengine, kinds, postprocess, settings, system.
"""
