from common.skeleton import idle

idle("summarizer", arrives_with="the memory loop")
